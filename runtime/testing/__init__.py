"""Test doubles shipped with plancast: the scripted OpenAI-compatible model server."""

from ._http import read_request as read_request
from ._scenario import Latency as Latency
from ._scenario import Rejection as Rejection
from ._scenario import Rule as Rule
from ._scenario import Scenario as Scenario
from ._scenario import ScenarioError as ScenarioError
from ._scenario import ScriptedToolCall as ScriptedToolCall
from ._scenario import load_scenario as load_scenario
from ._scenario import parse_scenario as parse_scenario
from ._server import FINGERPRINT as FINGERPRINT
from ._server import RecordedRequest as RecordedRequest
from ._server import ScriptedModelServer as ScriptedModelServer
from ._server import open_scripted_model_server as open_scripted_model_server
from ._standalone import scripted_banner as scripted_banner
from ._standalone import serve_until_stopped as serve_until_stopped

__all__ = (
    "FINGERPRINT",
    "Latency",
    "RecordedRequest",
    "Rejection",
    "Rule",
    "Scenario",
    "ScenarioError",
    "ScriptedModelServer",
    "ScriptedToolCall",
    "load_scenario",
    "open_scripted_model_server",
    "parse_scenario",
    "read_request",
    "scripted_banner",
    "serve_until_stopped",
)
