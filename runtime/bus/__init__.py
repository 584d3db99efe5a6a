"""The bus: everything that talks to NATS (the only package that imports nats). A
connection bound to one deployment prefix, JetStream publishing with fences and objects,
KV reads, streams and consumers, per-role users, the embedded and local nats-server, and
the sources actors read; the NATS errors callers catch are re-exported here."""

from .auth import ADMIN as ADMIN
from .auth import CLIENT as CLIENT
from .auth import CONF_FILE as CONF_FILE
from .auth import DEFAULT_URL as DEFAULT_URL
from .auth import WATCHER as WATCHER
from .auth import UserCreds as UserCreds
from .auth import creds_file as creds_file
from .auth import grants as grants
from .auth import inbox_prefix as inbox_prefix
from .auth import read_creds as read_creds
from .auth import write_auth as write_auth
from .connection import connect as connect
from .connection import open_bus as open_bus
from .core import EXPECT_SEQ as EXPECT_SEQ
from .core import EXPECT_STREAM as EXPECT_STREAM
from .core import FENCE_BUSY as FENCE_BUSY
from .core import MAX_OBJECT_BYTES as MAX_OBJECT_BYTES
from .core import RETRY_CAP as RETRY_CAP
from .core import TRANSIENT as TRANSIENT
from .core import UNCONFIRMED as UNCONFIRMED
from .core import WRONG_LAST_SEQUENCE as WRONG_LAST_SEQUENCE
from .core import Bus as Bus
from .core import Unsettled as Unsettled
from .core import fence_headers as fence_headers
from .core import nuid as nuid
from .core import offloaded as offloaded
from .delivery import Delivery as Delivery
from .embedded import ENV_VAR as ENV_VAR
from .embedded import NatsServerProcess as NatsServerProcess
from .embedded import cluster_formed as cluster_formed
from .embedded import find_nats_server as find_nats_server
from .embedded import free_port as free_port
from .embedded import free_ports as free_ports
from .embedded import meta_leader_elected as meta_leader_elected
from .embedded import open_embedded_server as open_embedded_server
from .embedded import start_cluster as start_cluster
from .errors import APIError as APIError
from .errors import BucketNotFoundError as BucketNotFoundError
from .errors import ConnectionClosedError as ConnectionClosedError
from .errors import ConsumerGone as ConsumerGone
from .errors import CredsError as CredsError
from .errors import Fenced as Fenced
from .errors import InsecureFile as InsecureFile
from .errors import KeyNotFoundError as KeyNotFoundError
from .errors import KeyWrongLastSequenceError as KeyWrongLastSequenceError
from .errors import MissingConsumer as MissingConsumer
from .errors import NatsServerNotFound as NatsServerNotFound
from .errors import NatsServerStartError as NatsServerStartError
from .errors import NatsUnreachable as NatsUnreachable
from .errors import NoRespondersError as NoRespondersError
from .errors import NotFoundError as NotFoundError
from .errors import ObjectRefused as ObjectRefused
from .errors import ProvisionError as ProvisionError
from .errors import PublishRefused as PublishRefused
from .errors import StorageFull as StorageFull
from .errors import StoreInUse as StoreInUse
from .intake import PULL_CAP as PULL_CAP
from .intake import Intake as Intake
from .jetstream import acknowledged as acknowledged
from .jetstream import outcome as outcome
from .kv import WATCH_LINGER as WATCH_LINGER
from .kv import current_values as current_values
from .local import PORT as PORT
from .local import SECRET as SECRET
from .local import SERVES as SERVES
from .local import URL as URL
from .local import holding as holding
from .local import running as running
from .local import secret_of as secret_of
from .local import serving as serving
from .nats_client import PlancastClient as PlancastClient
from .nats_client import header_block as header_block
from .private_files import private_dir as private_dir
from .private_files import read_private as read_private
from .private_files import write_private as write_private
from .provisioning import Retry as Retry
from .provisioning import is_transient as is_transient
from .provisioning import provision as provision
from .provisioning import provision_consumers as provision_consumers
from .provisioning import stream_configs as stream_configs
from .pull import Pull as Pull
from .sources import Source as Source
from .sources import Subscription as Subscription
from .sources import WorkQueue as WorkQueue
from .sources import consumer_config as consumer_config
from .sources import make_if_missing as make_if_missing
from .sources import on as on
from .stream_reader import HEARTBEAT as HEARTBEAT
from .stream_reader import StreamReader as StreamReader
from .stream_reader import describe as describe
from .stream_reader import stream_missing as stream_missing

__all__ = (
    "ADMIN",
    "CLIENT",
    "CONF_FILE",
    "DEFAULT_URL",
    "ENV_VAR",
    "EXPECT_SEQ",
    "EXPECT_STREAM",
    "FENCE_BUSY",
    "HEARTBEAT",
    "MAX_OBJECT_BYTES",
    "PORT",
    "PULL_CAP",
    "RETRY_CAP",
    "SECRET",
    "SERVES",
    "TRANSIENT",
    "UNCONFIRMED",
    "URL",
    "WATCHER",
    "WATCH_LINGER",
    "WRONG_LAST_SEQUENCE",
    "APIError",
    "BucketNotFoundError",
    "Bus",
    "ConnectionClosedError",
    "ConsumerGone",
    "CredsError",
    "Delivery",
    "Fenced",
    "InsecureFile",
    "Intake",
    "KeyNotFoundError",
    "KeyWrongLastSequenceError",
    "MissingConsumer",
    "NatsServerNotFound",
    "NatsServerProcess",
    "NatsServerStartError",
    "NatsUnreachable",
    "NoRespondersError",
    "NotFoundError",
    "ObjectRefused",
    "PlancastClient",
    "ProvisionError",
    "PublishRefused",
    "Pull",
    "Retry",
    "Source",
    "StorageFull",
    "StoreInUse",
    "StreamReader",
    "Subscription",
    "Unsettled",
    "UserCreds",
    "WorkQueue",
    "acknowledged",
    "cluster_formed",
    "connect",
    "consumer_config",
    "creds_file",
    "current_values",
    "describe",
    "fence_headers",
    "find_nats_server",
    "free_port",
    "free_ports",
    "grants",
    "header_block",
    "holding",
    "inbox_prefix",
    "is_transient",
    "make_if_missing",
    "meta_leader_elected",
    "nuid",
    "offloaded",
    "on",
    "open_bus",
    "open_embedded_server",
    "outcome",
    "private_dir",
    "provision",
    "provision_consumers",
    "read_creds",
    "read_private",
    "running",
    "secret_of",
    "serving",
    "start_cluster",
    "stream_configs",
    "stream_missing",
    "write_auth",
    "write_private",
)
