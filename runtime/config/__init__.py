"""Configuration: settings from flags, the environment and ``.env``, team files, model
presets, role options, MCP servers and the rules of sub-teams. Plain values, no I/O beyond reading a
file, so every layer can be handed what it needs."""

from .errors import ModelConfigError as ModelConfigError
from .errors import TeamConfigError as TeamConfigError
from .load import load_team as load_team
from .load import team_from_dict as team_from_dict
from .mcp import McpServerConfig as McpServerConfig
from .mcp import mcp_tool_name as mcp_tool_name
from .mcp import split_mcp_tool as split_mcp_tool
from .model import DIALECTS as DIALECTS
from .model import ROLE_HEADER as ROLE_HEADER
from .model import SCRIPTED_NO_ANSWER as SCRIPTED_NO_ANSWER
from .model import ModelSettings as ModelSettings
from .model import Structured as Structured
from .role_options import RoleOption as RoleOption
from .role_options import option_problems as option_problems
from .settings import Settings as Settings
from .subteams import is_team as is_team
from .subteams import plan_roles as plan_roles
from .subteams import request_problem as request_problem
from .team import DEFAULT_MAX_TOKENS as DEFAULT_MAX_TOKENS
from .team import MODEL_KINDS as MODEL_KINDS
from .team import SERVICE_KINDS as SERVICE_KINDS
from .team import TEAM_KIND as TEAM_KIND
from .team import RoleConfig as RoleConfig
from .team import TeamConfig as TeamConfig
from .team import default_max_tokens as default_max_tokens

__all__ = (
    "DEFAULT_MAX_TOKENS",
    "DIALECTS",
    "MODEL_KINDS",
    "ROLE_HEADER",
    "SCRIPTED_NO_ANSWER",
    "SERVICE_KINDS",
    "TEAM_KIND",
    "McpServerConfig",
    "ModelConfigError",
    "ModelSettings",
    "RoleConfig",
    "RoleOption",
    "Settings",
    "Structured",
    "TeamConfig",
    "TeamConfigError",
    "default_max_tokens",
    "is_team",
    "load_team",
    "mcp_tool_name",
    "option_problems",
    "plan_roles",
    "request_problem",
    "split_mcp_tool",
    "team_from_dict",
)
