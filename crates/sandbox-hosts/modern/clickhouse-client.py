"""The `clickhouse-client` of a sandbox pod whose engine is "modern" (ClickHouse 26.9 from chdb-core).

There is no modern ClickHouse server or client package this machine can install, so a modern pod
has no server process: this program stands in for the client and runs the SQL in-process on a chdb
session over the pod's own data directory. It behaves, as far as a caller of the client can see, as
the modern client talking to a server does, because that is what the product meets in a cluster:

- the option table: client options, and every server setting as `--name=value`; anything else is
  refused as the modern client refuses it (code 552, UNRECOGNIZED_ARGUMENTS);
- argv, then the client configuration file from `--config-file` (XML, also when it is a pipe),
  then the CLICKHOUSE_HOST / CLICKHOUSE_USER / CLICKHOUSE_PASSWORD variables (as a 25.7+ client
  reads them), give host, user and password; a host that is not one of the pod's own names is
  refused as a connection (code 210: no modern pod runs a server another pod could reach), and
  user and password are checked against the pod's users (the same users.xml its 18.16 twin would
  serve): a wrong one fails with code 516;
- results as TabSeparated (or `--format`) on stdout; errors as the client prints a server's
  exception on stderr, exit status the code mod 256 (a multiple of 256 gives 255);
- several statements in one input run one by one (multi-statement input is the modern default), the
  first failure ends the run unless `--ignore-error` is given;
- a pod whose "server" is stopped (sandbox fault) refuses the connection (code 210);
- one call at a time per pod (an flock on the pod's directory), as chdb holds its data directory;
- what a server keeps in memory between queries, kept in the pod's directory between calls: the
  tables whose merges `SYSTEM STOP MERGES` stopped (by table UUID, so a RENAME keeps them stopped,
  as on a server), until `SYSTEM START MERGES` or the "server" stops. (The product's rebuild no
  longer stops merges; a test or an operator's session may, and should meet what a server does.)

Not a server: no native protocol, no distributed DDL queue (ON CLUSTER names no known cluster), no
replication threads (an INSERT into a Replicated table does not return). README says so.

Environment (set by the pod's wrapper script, never by the exec's caller): CHSBX_POD_DIR, the pod's
directory under the sandbox's run directory.
"""

import ctypes
import fcntl
import importlib.util
import os
import sys
import types
import xml.etree.ElementTree as ET

VERSION = "26.9.2"

# Client options that take a value (`--name=value` or `--name value`), with their short forms.
VALUE_OPTIONS = {
    "config-file", "config", "host", "port", "user", "password", "database", "query", "format",
    "queries-file", "history_file", "log-level", "send_logs_level", "connection", "quota_key",
    "max_client_network_bandwidth", "compression", "query_id", "query_kind", "jwt", "ssh-key-file",
    "ssh-key-passphrase", "server_logs_file", "accept-invalid-certificate", "client_logs_file",
    "progress", "output-format", "opentelemetry-traceparent", "opentelemetry-tracestate",
    "interleave-queries-file", "stage", "external", "file", "name", "structure", "types", "pager",
}
SHORT_VALUE = {"C": "config-file", "h": "host", "u": "user", "d": "database", "q": "query", "f": "format"}
# Client options that are flags.
FLAG_OPTIONS = {
    "multiquery", "multiline", "ignore-error", "stacktrace", "echo", "time", "no-warnings",
    "secure", "vertical", "verbose", "ask-password", "disable_suggestion", "testmode", "help",
    "version", "version-clean", "highlight", "print-profile-events", "hardware-utilization",
    "enable-progress-table-toggle", "progress-table", "fake-drop", "memory-usage", "tmp-file",
}
SHORT_FLAG = {"n": "multiquery", "m": "multiline", "t": "time", "s": "secure", "E": "vertical",
              "A": "disable_suggestion", "T": "testmode", "V": "version"}

ERROR_NAMES = {
    36: "BAD_ARGUMENTS", 210: "NETWORK_ERROR", 516: "AUTHENTICATION_FAILED",
    552: "UNRECOGNIZED_ARGUMENTS", 115: "UNKNOWN_SETTING",
}


class ClientError(Exception):
    """An error the client itself reports (no statement): printed alone, exit code from it."""

    def __init__(self, code, message, from_server=None):
        super().__init__(message)
        self.code = code
        self.text = "Code: {}. DB::Exception: {}{}. ({})".format(
            code, "Received from {}. DB::Exception: ".format(from_server) if from_server else "",
            message, ERROR_NAMES.get(code, "UNKNOWN"))


def exit_status(code):
    """The client's exit status for error `code`: the low byte, 255 when that is 0."""
    low = code & 0xFF
    return low if low else 255


def parse_args(argv):
    """(options, settings): client options by long name, settings as (name, text) in argv order."""
    options, settings = {}, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in FLAG_OPTIONS and not eq:
                options[name] = True
            elif name in VALUE_OPTIONS or name.startswith("param_"):
                if not eq:
                    if i >= len(argv):
                        raise ClientError(36, "Option '--{}' requires an argument".format(name))
                    value = argv[i]
                    i += 1
                options[name] = value
            elif eq and name and all(c.isalnum() or c == "_" for c in name):
                # A setting; whether the server knows it is checked once the session is open.
                settings.append((name, value, arg))
            else:
                raise ClientError(552, "Unrecognized option '{}'".format(arg))
        elif arg.startswith("-") and len(arg) > 1:
            short, rest = arg[1], arg[2:]
            if short in SHORT_FLAG and not rest:
                options[SHORT_FLAG[short]] = True
            elif short in SHORT_VALUE:
                if not rest:
                    if i >= len(argv):
                        raise ClientError(36, "Option '-{}' requires an argument".format(short))
                    rest = argv[i]
                    i += 1
                options[SHORT_VALUE[short]] = rest
            else:
                raise ClientError(552, "Unrecognized option '{}'".format(arg))
        else:
            raise ClientError(36, "Positional option `{}` is not supported.".format(arg))
    return options, settings


def read_config(path):
    """The client configuration file as {element: text} of its root's children; read once (a pipe)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ClientError(36, "Cannot read config file {}: {}".format(path, e.strerror))
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise ClientError(36, "SAXParseException: {} in {}".format(e, path))
    return {child.tag: (child.text or "") for child in root}


def pod_users(pod_dir):
    """{user: password} of the pod's users.xml."""
    root = ET.parse(os.path.join(pod_dir, "users.xml")).getroot()
    users = root.find("users")
    return {u.tag: (u.findtext("password") or "") for u in (users if users is not None else [])}


def local_names(pod_dir):
    """The names this pod answers to on its own port: loopback, its hostname, its addresses."""
    names = {"localhost", "127.0.0.1", "::1", os.uname().nodename}
    try:
        with open(os.path.join(pod_dir, "addresses")) as f:
            names.update(line.strip() for line in f if line.strip())
    except OSError:
        pass
    return names


def split_statements(text):
    """Statements of `text` split at top-level semicolons (outside quotes and comments), each with
    its trailing semicolon removed and surrounding whitespace stripped; empty ones dropped."""
    out, start, i, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            i += 1
            while i < n and text[i] != c:
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif text.startswith("--", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == ";":
            out.append(text[start:i])
            i += 1
            start = i
        else:
            i += 1
    out.append(text[start:])
    return [s.strip() for s in out if has_code(s)]


def has_code(statement):
    """Whether `statement` holds more than whitespace and comments."""
    rest = statement.strip()
    while rest:
        if rest.startswith("--") or rest.startswith("#"):
            j = rest.find("\n")
            rest = "" if j < 0 else rest[j + 1:].strip()
        elif rest.startswith("/*"):
            j = rest.find("*/")
            rest = "" if j < 0 else rest[j + 2:].strip()
        else:
            return True
    return False


def error_code(message):
    """The code in a chdb exception's text `Code: N. DB::Exception: ...`."""
    if message.startswith("Code: "):
        digits = message[6:].split(".", 1)[0]
        if digits.isdigit():
            return int(digits)
    return 1001  # STD_EXCEPTION: what a server reports for an error that is not its own


def server_error_text(message, server):
    """A chdb exception as the client prints a server's: `Received from host:port.` inserted."""
    prefix = "DB::Exception: "
    head, sep, tail = message.partition(prefix)
    if not sep:
        return "Code: {}. DB::Exception: Received from {}. {}".format(error_code(message), server, message)
    return "{}{}Received from {}. {}{}".format(head, sep, server, prefix, tail)


def main(argv):
    pod_dir = os.environ.get("CHSBX_POD_DIR")
    if not pod_dir:
        print("clickhouse-client (sandbox stand-in): CHSBX_POD_DIR is not set", file=ERR)
        return 1
    try:
        return run(pod_dir, argv)
    except ClientError as e:
        print(e.text, file=ERR)
        return exit_status(e.code)
    except Exception as e:  # the stand-in's own failure: say so, as a crashed client would
        print("clickhouse-client (sandbox stand-in) failed: {}: {}".format(type(e).__name__, e), file=ERR)
        return 1


def run(pod_dir, argv):
    options, settings = parse_args(argv)
    if options.get("version"):
        print("ClickHouse client version {} (sandbox stand-in on chdb).".format(VERSION))
        return 0
    config = read_config(options["config-file"]) if "config-file" in options else {}

    def pick(key, env):
        if key in options:
            return options[key]
        if key in config:
            return config[key]
        return os.environ.get(env) if env else None

    host = pick("host", "CLICKHOUSE_HOST") or "localhost"
    port = pick("port", None) or "9000"
    user = pick("user", "CLICKHOUSE_USER") or "default"
    password = pick("password", "CLICKHOUSE_PASSWORD") or ""
    server = "{}:{}".format(host, port)
    if host not in local_names(pod_dir) or port != "9000" or os.path.exists(os.path.join(pod_dir, "stopped")):
        # Nothing listens: the pod's only "server" is this program, and a stopped pod has none.
        raise ClientError(210, "Connection refused ({})".format(server))
    users = pod_users(pod_dir)
    if users.get(user) != password:
        raise ClientError(
            516, "{}: Authentication failed: password is incorrect, or there is no user with such name".format(user),
            from_server=server)

    if "query" in options:
        text = options["query"]
    elif "queries-file" in options:
        with open(options["queries-file"]) as f:
            text = f.read()
    else:
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
    statements = split_statements(text)
    fmt = options.get("format", "TabSeparated")
    ignore_error = bool(options.get("ignore-error"))

    lock = open(os.path.join(pod_dir, "client.lock"), "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    OPEN.append(lock)
    engine = load_engine(pod_dir)
    conn = engine.connect("{}?config-file={}".format(
        os.path.join(pod_dir, "data"), os.path.join(pod_dir, "chdb.xml")))
    # Never closed nor collected: closing waits on the engine's ZooKeeper session for minutes, then
    # aborts. The process ends with os._exit instead; every statement's effects are on disk by then.
    OPEN.append(conn)
    for name, value, arg in settings:
        try:
            conn.query("SET {} = {}".format(name, quote(value)), "TabSeparated")
        except RuntimeError as e:
            if error_code(str(e)) == 115:
                raise ClientError(552, "Unrecognized option '{}'".format(arg))
            raise ClientError(error_code(str(e)), str(e).split("DB::Exception: ", 1)[-1].rsplit(" (", 1)[0])
    database = pick("database", None)
    if database:
        try:
            conn.query("USE {}".format(backquote(database)), "TabSeparated")
        except RuntimeError as e:
            print(server_error_text(str(e), server), file=ERR)
            return exit_status(error_code(str(e)))
    restore_stopped_merges(conn, pod_dir)
    status = 0
    for statement in statements:
        try:
            result = query_retrying_session_clash(conn, statement, fmt)
            remember_merges(conn, pod_dir, statement)
            sys.stdout.buffer.write(result.bytes())
            sys.stdout.buffer.flush()
            status = 0
        except RuntimeError as e:
            message = str(e)
            ERR.write("Received exception from server (version {}):\n{}\n(query: {})\n".format(
                VERSION, server_error_text(message, server), statement))
            ERR.flush()
            status = exit_status(error_code(message))
            if not ignore_error:
                return status
    return status


def stopped_merges_path(pod_dir):
    return os.path.join(pod_dir, "stopped-merges")


def read_stopped_merges(pod_dir):
    """The UUIDs of the tables whose merges are stopped."""
    try:
        with open(stopped_merges_path(pod_dir)) as f:
            return {line.strip() for line in f if line.strip()}
    except OSError:
        return set()


def write_stopped_merges(pod_dir, uuids):
    path = stopped_merges_path(pod_dir)
    with open(path + ".tmp", "w") as f:
        f.write("".join(u + "\n" for u in sorted(uuids)))
    os.replace(path + ".tmp", path)


def restore_stopped_merges(conn, pod_dir):
    """Stops merges again of the tables an earlier call stopped them for (those still there)."""
    uuids = read_stopped_merges(pod_dir)
    if not uuids:
        return
    listed = ", ".join("'" + u + "'" for u in sorted(uuids))
    rows = conn.query(
        "SELECT toString(uuid), database, name FROM system.tables WHERE toString(uuid) IN ({})".format(listed),
        "TabSeparated").bytes().decode()
    present = set()
    for line in rows.splitlines():
        uuid, database, name = line.split("\t")
        present.add(uuid)
        conn.query("SYSTEM STOP MERGES {}.{}".format(backquote(database), backquote(name)), "TabSeparated")
    if present != uuids:
        write_stopped_merges(pod_dir, present)


def remember_merges(conn, pod_dir, statement):
    """After a `SYSTEM STOP MERGES t` or `SYSTEM START MERGES t` that ran: t's UUID kept or let go."""
    words = statement.split(None, 3)
    if len(words) != 4 or [w.upper() for w in words[:3]] not in (
            ["SYSTEM", "STOP", "MERGES"], ["SYSTEM", "START", "MERGES"]):
        return
    parts = split_name(words[3].strip())
    if len(parts) == 2:
        database, name = parts
    elif len(parts) == 1:
        database, name = conn.query("SELECT currentDatabase()", "TabSeparated").bytes().decode().strip(), parts[0]
    else:
        return
    rows = conn.query(
        "SELECT toString(uuid) FROM system.tables WHERE database = {} AND name = {}".format(quote(database), quote(name)),
        "TabSeparated").bytes().decode().split()
    if not rows:
        return
    uuids = read_stopped_merges(pod_dir)
    if words[1].upper() == "STOP":
        uuids.add(rows[0])
    else:
        uuids.discard(rows[0])
    write_stopped_merges(pod_dir, uuids)


def split_name(text):
    """`db`.`t`, db.t or t as its parts, backquotes removed; [] for anything else."""
    parts, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "`":
            j, out = i + 1, []
            while j < n and text[j] != "`":
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                out.append(text[j])
                j += 1
            parts.append("".join(out))
            i = j + 1
        else:
            j = i
            while j < n and text[j] != ".":
                j += 1
            parts.append(text[i:j].strip())
            i = j
        if i < n:
            if text[i] != ".":
                return []
            i += 1
    return parts


def query_retrying_session_clash(conn, statement, fmt):
    """Runs `statement`, again while its ZooKeeper session cannot start because another pod's
    engine holds the session node: every chdb process registers its session under the same
    all-zero server UUID (it loads no server UUID), so two pods opening sessions at once clash.
    A real server has a UUID of its own; the statement did nothing, so it runs again (up to ~10 s)."""
    import time
    deadline = time.monotonic() + 10
    while True:
        try:
            return conn.query(statement, fmt)
        except RuntimeError as e:
            clash = error_code(str(e)) == 999 and "sessions/zookeeper/00000000-0000-0000-0000-000000000000" in str(e)
            if not clash or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def load_engine(pod_dir):
    """chdb's extension module, loaded the way its package loads it but without the package's
    `__init__`, which opens a throwaway in-memory engine with the default configuration first (in a
    pod's namespace that engine cannot read cgroups and prints a symbolised stack trace, ~0.7 s).
    The engine's own messages to stderr go to the pod's log, not to the caller."""
    log = os.open(os.path.join(pod_dir, "log", "chdb-stderr.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    global ERR
    ERR = os.fdopen(os.dup(2), "w")
    os.dup2(log, 2)
    package = importlib.util.find_spec("chdb").submodule_search_locations[0]
    module = types.ModuleType("chdb")
    module.__path__ = [package]
    sys.modules["chdb"] = module
    # As chdb's __init__ does: RTLD_DEEPBIND, and its directory current while the module loads.
    ctypes.CDLL(os.path.join(package, "_chdb.abi3.so"), mode=sys.getdlopenflags() | 0x8)
    cwd = os.getcwd()
    os.chdir(package)
    try:
        from chdb import _chdb
    finally:
        os.chdir(cwd)
    return _chdb


def quote(value):
    """A setting's value as an SQL string literal (the server converts it to the setting's type)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def backquote(name):
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


# Where the client's own messages go: stderr, until the engine is loaded (load_engine).
ERR = sys.stderr
# The pod's lock and the engine's connection, kept until os._exit.
OPEN = []

if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    ERR.flush()
    # Not a normal exit: the engine's destructors wait on its ZooKeeper session and then abort.
    os._exit(status)
