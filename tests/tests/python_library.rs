//! End-to-end tests of what the Python guest can import: the whole standard library, served
//! from the library image, and pure-Python packages baked into a guest with
//! `cargo xtask python-guest --requirements FILE` (the guest tests/python-packages.txt names,
//! which `cargo xtask test` builds). Run on a KVM that runs Hyperlight guests (the nested-KVM
//! VM here).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hyperlightd_client::{ExecRequest, ExecStatus, Language};
use hyperlightd_e2e::{
    Daemon, STEP_LIMIT, py, py_with_timeout, python_guest, python_guest_with_packages, within,
};
use serde_json::json;

/// A daemon with one Python sandbox of `guest`. Importing hundreds of modules takes a minute or
/// more under emulation: requests may take up to 5 minutes.
async fn daemon_with_guest(guest: std::path::PathBuf) -> Daemon {
    let guest = guest.to_str().unwrap();
    Daemon::start(&[
        "--pool",
        "python=1",
        "--python-guest",
        guest,
        "--max-timeout-ms",
        "300000",
    ])
    .await
}

async fn python_daemon() -> Daemon {
    daemon_with_guest(python_guest()).await
}

/// Runs `request`, waiting at most its own time limit and a margin.
async fn run(daemon: &Daemon, request: ExecRequest) -> hyperlightd_client::ExecResponse {
    let limit = Duration::from_millis(request.timeout_ms.unwrap_or(0)) + STEP_LIMIT;
    within("exec", limit, daemon.client().exec(&request))
        .await
        .unwrap_or_else(|e| panic!("exec failed: {e}\ndaemon log:\n{}", daemon.log()))
}

#[tokio::test]
async fn the_standard_library_modules_work() {
    let daemon = python_daemon().await;
    let program = r#"
import json, math, re, datetime, collections, itertools, functools, statistics, decimal
import fractions, random, hashlib, base64, textwrap, string, heapq, bisect, dataclasses
import typing, enum, csv, io, unicodedata

@dataclasses.dataclass
class Point:
    x: int
    y: int

class Color(enum.Enum):
    RED = 1

def total(xs: typing.List[int]) -> int:
    return functools.reduce(lambda a, b: a + b, xs)

rows = list(csv.reader(io.StringIO("a,b\n1,2\n")))
heap = [5, 1, 3]
heapq.heapify(heap)
{
    "json": json.loads('{"k": [1, 2]}')["k"],
    "math": math.isqrt(1000000),
    "re": re.findall(r"\d+", "a1b22c333"),
    "datetime": datetime.date(2024, 2, 29).isoformat(),
    "now_year_ok": datetime.datetime.now().year >= 2024,
    "collections": collections.Counter("hello").most_common(1)[0][0],
    "itertools": list(itertools.accumulate([1, 2, 3])),
    "functools": total([1, 2, 3, 4]),
    "statistics": statistics.median([3, 1, 2]),
    "decimal": str(decimal.Decimal("0.1") + decimal.Decimal("0.2")),
    "fractions": str(fractions.Fraction(1, 3) + fractions.Fraction(1, 6)),
    "random": 0 <= random.random() < 1,
    "hashlib": hashlib.sha256(b"abc").hexdigest()[:16],
    "base64": base64.b64encode(b"hi").decode(),
    "textwrap": textwrap.wrap("aaa bbb ccc", 7),
    "string": string.ascii_lowercase[:5],
    "heapq": heapq.heappop(heap),
    "bisect": bisect.bisect([1, 3, 5], 4),
    "dataclasses": dataclasses.asdict(Point(1, 2)),
    "enum": Color.RED.name,
    "csv": rows,
    "unicodedata": unicodedata.name("é"),
}
"#;
    let response = run(&daemon, py(program)).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(
        response.result,
        json!({
            "json": [1, 2],
            "math": 1000,
            "re": ["1", "22", "333"],
            "datetime": "2024-02-29",
            "now_year_ok": true,
            "collections": "l",
            "itertools": [1, 3, 6],
            "functools": 10,
            "statistics": 2,
            "decimal": "0.3",
            "fractions": "1/2",
            "random": true,
            "hashlib": "ba7816bf8f01cfea",
            "base64": "aGk=",
            "textwrap": ["aaa bbb", "ccc"],
            "string": "abcde",
            "heapq": 1,
            "bisect": 2,
            "dataclasses": { "x": 1, "y": 2 },
            "enum": "RED",
            "csv": [["a", "b"], ["1", "2"]],
            "unicodedata": "LATIN SMALL LETTER E WITH ACUTE",
        })
    );
}

/// The modules of `sys.stdlib_module_names` that do not import in the guest: C extensions that
/// CPython's WebAssembly build, as componentize-py ships it, does not have (guest/README.md
/// says why for each), and the modules built on them.
const ABSENT_MODULES: &[&str] = &[
    "_ctypes",
    "_curses",
    "_curses_panel",
    "_dbm",
    "_gdbm",
    "_hashlib",
    "_interpchannels",
    "_interpqueues",
    "_interpreters",
    "_lzma",
    "_multiprocessing",
    "_overlapped",
    "_posixshmem",
    "_posixsubprocess",
    "_remote_debugging",
    "_scproxy",
    "_ssl",
    "_tkinter",
    "_uuid",
    "_winapi",
    "_wmi",
    "_zstd",
    "ctypes",
    "curses",
    "fcntl",
    "grp",
    "lzma",
    "mmap",
    "msvcrt",
    "nt",
    "pty",
    "pwd",
    "readline",
    "resource",
    "ssl",
    "syslog",
    "termios",
    "tkinter",
    "tty",
    "turtle",
    "winreg",
    "winsound",
];

#[tokio::test]
async fn the_whole_standard_library_imports_and_everyday_modules_work() {
    let daemon = python_daemon().await;
    let absent = serde_json::to_string(ABSENT_MODULES).unwrap();
    let imports = format!(
        "import importlib, sys\n\
         absent = set({absent})\n\
         def imports(name):\n\
         \x20   try:\n\
         \x20       importlib.import_module(name)\n\
         \x20       return None\n\
         \x20   except BaseException as e:\n\
         \x20       return repr(e)\n\
         names = sorted(sys.stdlib_module_names - {{'antigravity', 'this'}})\n\
         failed = {{n: imports(n) for n in names if n not in absent}}\n\
         failed = {{n: e for n, e in failed.items() if e is not None}}\n\
         present = [n for n in sorted(absent) if imports(n) is None]\n\
         [failed, len(names) - len(absent), len(sys.stdlib_module_names), present]"
    );
    let response = run(&daemon, py_with_timeout(&imports, 240_000)).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    let [failed, imported, all, now_present] = &response.result.as_array().unwrap()[..] else {
        panic!("{response:?}");
    };
    assert_eq!(failed, &json!({}), "modules that should import but do not");
    assert_eq!(
        now_present,
        &json!([]),
        "modules listed as absent that are there"
    );
    println!("{imported} of {all} standard library modules import");
    assert_eq!(
        imported,
        &json!(253),
        "every module but the absent ones, `this` and `antigravity`"
    );

    let program = r#"
import asyncio, colorsys, concurrent.futures, configparser, contextvars, doctest, email, fnmatch
import glob, graphlib, gzip, hmac, html, io, ipaddress, logging, pickle, queue, secrets, shlex
import shutil, tarfile, tempfile, threading, timeit, tomllib, unittest, wave, zipfile, zoneinfo
import argparse, datetime, xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse, parse_qs

async def add(a, b):
    await asyncio.sleep(0.01)
    return a + b
async def both():
    return await asyncio.gather(add(1, 2), add(3, 4))

var = contextvars.ContextVar("var", default=0)
var.set(5)
local = threading.local()
local.x = 7
with threading.Lock():
    pass
future = concurrent.futures.Future()
future.set_result(9)
q = queue.Queue()
q.put("queued")
config = configparser.ConfigParser()
config.read_string("[s]\nk = v\n")
parser = argparse.ArgumentParser(prog="p")
parser.add_argument("--n", type=int)
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.INFO, format="%(levelname)s %(message)s")
logging.getLogger("agent").info("logged")
zipped = io.BytesIO()
with zipfile.ZipFile(zipped, "w") as z:
    z.writestr("a.txt", "zip")
tarred = io.BytesIO()
with tarfile.open(fileobj=tarred, mode="w") as t:
    info = tarfile.TarInfo("b.txt")
    info.size = 3
    t.addfile(info, io.BytesIO(b"tar"))
tarred.seek(0)
sound = io.BytesIO()
with wave.open(sound, "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000); w.writeframes(b"\0\0" * 8)
class Case(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(1 + 1, 2)
suite = unittest.defaultTestLoader.loadTestsFromTestCase(Case)
def doubled(x):
    """
    >>> doubled(2)
    4
    """
    return 2 * x
tester = doctest.DocTestRunner()
for test in doctest.DocTestFinder().find(doubled, "doubled", globs={"doubled": doubled}):
    tester.run(test, out=lambda text: None)
with tempfile.SpooledTemporaryFile(max_size=100) as spool:
    spool.write(b"spooled"); spool.seek(0); spooled = spool.read()
{
    "pathlib": Path("/data/report.csv").suffix,
    "pathlib_read": Path("/python/os.py").read_text().startswith('r"""OS routines'),
    "logging": log.getvalue(),
    "urllib": [urlparse("https://a.example/p?q=1").netloc, parse_qs("q=1&q=2")["q"]],
    "xml": ET.fromstring("<a><b>x</b></a>").find("b").text,
    "html": html.escape("<b>"),
    "email": email.message_from_string("Subject: hi\n\nbody")["Subject"],
    "zipfile": zipfile.ZipFile(zipped).read("a.txt").decode(),
    "gzip": gzip.decompress(gzip.compress(b"gz")).decode(),
    "tarfile": tarfile.open(fileobj=tarred).extractfile("b.txt").read().decode(),
    "tempfile": spooled.decode(),
    "shutil": shutil.which("definitely-not-here"),
    "glob": sorted(Path(p).name for p in glob.glob("/python/json/*.py"))[:2],
    "fnmatch": fnmatch.fnmatch("report.csv", "*.csv"),
    "tomllib": tomllib.loads('a = 1\n[t]\nb = "c"')["t"]["b"],
    "zoneinfo": str(datetime.datetime(2024, 7, 1, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).utcoffset()),
    "ipaddress": str(ipaddress.ip_network("10.0.0.0/30").broadcast_address),
    "secrets": len(secrets.token_hex(8)),
    "hmac": hmac.new(b"k", b"m", "sha256").hexdigest()[:8],
    "pickle": pickle.loads(pickle.dumps({"a": (1, 2)})),
    "shlex": shlex.split("ls -l 'a b'"),
    "configparser": config["s"]["k"],
    "argparse": parser.parse_args(["--n", "3"]).n,
    "asyncio": asyncio.run(both()),
    "contextvars": var.get(),
    "concurrent": future.result(),
    "queue": q.get(),
    "threading": [local.x, threading.current_thread().name],
    "unittest": unittest.TextTestRunner(stream=io.StringIO()).run(suite).wasSuccessful(),
    "doctest": [tester.failures, tester.tries],
    "timeit": timeit.timeit("1 + 1", number=10) >= 0,
    "graphlib": list(graphlib.TopologicalSorter({"b": {"a"}}).static_order()),
    "colorsys": colorsys.rgb_to_hsv(1, 0, 0),
    "wave": len(sound.getvalue()),
}
"#;
    let response = run(&daemon, py_with_timeout(program, 120_000)).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(
        response.result,
        json!({
            "pathlib": ".csv",
            "pathlib_read": true,
            "logging": "INFO logged\n",
            "urllib": ["a.example", ["1", "2"]],
            "xml": "x",
            "html": "&lt;b&gt;",
            "email": "hi",
            "zipfile": "zip",
            "gzip": "gz",
            "tarfile": "tar",
            "tempfile": "spooled",
            "shutil": null,
            "glob": ["__init__.py", "__main__.py"],
            "fnmatch": true,
            "tomllib": "c",
            "zoneinfo": "2:00:00",
            "ipaddress": "10.0.0.3",
            "secrets": 16,
            // HMAC-SHA256(key "k", message "m"), as CPython on the host computes it.
            "hmac": "b60090e3",
            "pickle": {"a": [1, 2]},
            "shlex": ["ls", "-l", "a b"],
            "configparser": "v",
            "argparse": 3,
            "asyncio": [3, 7],
            "contextvars": 5,
            "concurrent": 9,
            "queue": "queued",
            "threading": [7, "MainThread"],
            "unittest": true,
            "doctest": [0, 1],
            "timeit": true,
            "graphlib": ["a", "b"],
            "colorsys": [0.0, 1.0, 1],
            "wave": 60,
        })
    );
}

/// What tests/python-packages.txt names, with what they depend on, and the guest's own.
const PACKAGES: &[(&str, &str)] = &[
    ("mpmath", "1.3.0"),
    ("networkx", "3.5"),
    ("python-dateutil", "2.9.0.post0"),
    ("six", "1.17.0"),
    ("sympy", "1.12.1"),
    ("tzdata", "2025.2"),
];

#[tokio::test]
async fn packages_baked_into_the_guest_are_listed_by_health_import_and_work() {
    let daemon = daemon_with_guest(python_guest_with_packages()).await;
    let health = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    let listed: Vec<(&str, &str)> = health.packages[&Language::Python]
        .iter()
        .map(|(name, version)| (name.as_str(), version.as_str()))
        .collect();
    assert_eq!(listed, PACKAGES);

    let program = r#"
import sympy, networkx as nx
from dateutil import parser, relativedelta, rrule
x = sympy.symbols("x")
g = nx.Graph([(1, 2), (2, 3), (3, 4), (1, 4), (4, 5)])
leap_day = parser.parse("2024-02-29T12:30:00+01:00")
{
    "roots": [int(r) for r in sympy.solve(x**2 - 5*x + 6, x)],
    "derivative": str(sympy.diff(x * sympy.sin(x), x)),
    "integral": str(sympy.integrate(2 * x, (x, 0, 3))),
    "path": nx.shortest_path(g, 1, 5),
    "components": nx.number_connected_components(g),
    "a_year_later": (leap_day + relativedelta.relativedelta(years=1)).isoformat(),
    "weekly": [d.day for d in rrule.rrule(rrule.WEEKLY, count=3, dtstart=leap_day.replace(day=4))],
}
"#;
    let response = run(&daemon, py_with_timeout(program, 240_000)).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    println!(
        "importing and using sympy, networkx and dateutil took {:.0} ms",
        response.duration_ms
    );
    assert_eq!(
        response.result,
        json!({
            "roots": [2, 3],
            "derivative": "x*cos(x) + sin(x)",
            "integral": "9",
            "path": [1, 4, 5],
            "components": 1,
            "a_year_later": "2025-02-28T12:30:00+01:00",
            "weekly": [4, 11, 18],
        })
    );

    // A package imported by one request is gone for the next (the sandbox is restored), and
    // the guest without packages has none of these.
    let again = run(&daemon, py("import sys\n'sympy' in sys.modules")).await;
    assert_eq!(again.result, json!(false), "{again:?}");
}

#[tokio::test]
async fn the_default_guest_lists_only_its_own_packages_and_has_no_others() {
    let daemon = python_daemon().await;
    let health = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    let listed: Vec<&str> = health.packages[&Language::Python]
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(listed, ["tzdata"]);
    let response = run(&daemon, py("import sympy")).await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    let error = response.error.unwrap();
    assert!(
        error
            .message
            .contains("ModuleNotFoundError: No module named 'sympy'"),
        "{error:?}"
    );
}
