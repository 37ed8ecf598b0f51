//! Project tooling, one entry point: `cargo xtask <command>` (or `./x <command>`, which also
//! runs setup first).
//!
//! - `vm -- CMD...`: run a command inside the nested-KVM VM (see [`vm`]);
//! - `test`: unit tests on the host, the checks of the systemd unit and the Kubernetes
//!   manifests ([`deploy`]), the end-to-end suite where KVM can run Hyperlight guests;
//! - `demo`: build, start the daemon (in the VM where the host cannot run guests) and run sample
//!   programs through `hlctl`;
//! - `bench`: the side-by-side benchmark (release build), on real KVM;
//! - `python-guest`: build the Python guest (`target/python-guest/python.aot`): componentize-py
//!   (from PyPI, in a virtualenv under `target/`) makes a WebAssembly component of CPython and
//!   `guest/python/runner.py`, and hyperlight-wasm-aot (from crates.io) compiles it ahead of time;
//! - `native-python`: build the native Python guest's root filesystem
//!   (`target/native-python/python.cpio`) from pinned Debian packages and PyPI wheels (see
//!   [`native_python`]);
//! - `js-vendor`: rebuild the JavaScript guest's web APIs (`guest/javascript/web-apis.js`)
//!   from npm with esbuild;
//! - `dist`: the Debian package (see [`dist`]);
//! - `image`: the container image, with no base image (see [`image`]);
//! - `docs`: the book and its generated references (see [`docs`]);
//! - `kvm`: say whether this host's KVM can run Hyperlight guests directly.
//!
//! Every step runs under a time limit and a timeout names the step.

mod bench;
mod deny;
mod deploy;
mod dist;
mod docs;
mod e2e;
mod image;
mod js_vendor;
mod kubernetes;
mod native_python;
mod python_guest;
mod python_sdk;
mod tools;
mod vm;
mod wit_world;

use self::deploy::check_deploy;
use self::js_vendor::{check_js_vendor, js_vendor, test_js_runner};
use self::python_guest::{python_guest, python_guest_for_package_tests};
use self::python_sdk::{python_sdk, python_sdk_checks};
use self::tools::{npm_packages, pinned_virtualenv, test_wheels};

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "hyperlightd's build, test and VM tooling")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a command inside the nested-KVM VM, in the current directory.
    Vm {
        /// Time limit for the whole VM, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// VM memory in MiB.
        #[arg(long, default_value_t = 4096)]
        memory: u32,
        /// Virtual CPUs.
        #[arg(long, default_value_t = 2)]
        cpus: u32,
        /// How QEMU runs the vCPUs: one host thread for all (reliable) or one each (faster).
        #[arg(long, value_enum, default_value_t = vm::Tcg::Single)]
        tcg: vm::Tcg,
        /// Boot systemd (on a writable overlay of the host's root) and run the command as one
        /// of its services.
        #[arg(long)]
        systemd: bool,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Unit tests on the host, then the end-to-end suite on real KVM (in the VM if need be).
    Test {
        /// Instead, the cluster test: the DaemonSet in a real Kubernetes (1.20, built once by
        /// `cargo xtask kubernetes`) on one node in the VM booted with systemd
        /// (tests/kube/cluster.sh). Run it before changing k8s/, the caller code or the image.
        #[arg(long)]
        kubernetes: bool,
    },
    /// Check the systemd unit and the Kubernetes manifests (part of `test`).
    CheckDeploy,
    /// Build the Debian package: target/dist/hyperlightd_VERSION_amd64.deb.
    Dist {
        /// Package the debug build (quicker; for tests) instead of a release build.
        #[arg(long)]
        debug: bool,
    },
    /// Build the container image the DaemonSet runs, with no base image (see xtask/src/image.rs):
    /// podman's localhost/hyperlightd:latest and target/image/hyperlightd.oci.tar.
    Image {
        /// The debug build (quicker; for tests) instead of a release build.
        #[arg(long)]
        debug: bool,
    },
    /// Build, start the daemon and run sample programs through hlctl.
    Demo,
    /// Release build, then the side-by-side benchmark on real KVM (in the VM if need be).
    Bench {
        /// Arguments for hyperlightd-bench (see `hyperlightd-bench --help`).
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Say whether this host's KVM can run Hyperlight guests directly.
    Kvm,
    /// Build a real Kubernetes's server binaries (1.20, from Debian's source package, with
    /// bullseye's Go 1.15) and the pause image, for the cluster test: target/kubernetes/.
    Kubernetes,
    /// Build the native Python guest's root filesystem, target/native-python/python.cpio:
    /// Debian's CPython 3.11 with the scientific stack, from the pins in guest/python-native/.
    NativePython {
        /// More packages, in pip's requirements format: binary wheels from PyPI, resolved with
        /// what they depend on against the default set's pins, and installed with their hashes.
        #[arg(long, conflicts_with = "lock")]
        requirements: Option<PathBuf>,
        /// Rewrite guest/python-native/debs.lock and requirements.lock from debs.txt and
        /// requirements.txt (what Debian's mirror and PyPI have now) instead of building.
        #[arg(long)]
        lock: bool,
    },
    /// Build the Python client's wheel (target/python-sdk/dist) and test environment, and run
    /// its host-side checks: pytest against a stand-in daemon, mypy --strict, ruff.
    PythonSdk,
    /// Regenerate api/openapi.json, the API's contract, from the wire types.
    Openapi,
    /// Write the book's generated references (docs/reference/), then build the book into
    /// target/book and check its links.
    Docs {
        /// Fail, changing nothing, when a committed reference differs from what the code
        /// generates (CI).
        #[arg(long)]
        check: bool,
    },
    /// Check the supply chain with cargo-deny (deny.toml): licenses, banned crates, duplicate
    /// versions and sources (advisories need RustSec's database, which these machines cannot
    /// fetch).
    Deny,
    /// Rebuild guest/javascript/web-apis.js from the npm packages guest/javascript/vendor/ pins.
    JsVendor,
    /// Build the Python guest, target/python-guest/python.aot, and its library,
    /// target/python-guest/python-lib.tar.
    PythonGuest {
        /// More packages for the guest, in pip's requirements format: pure-Python wheels from
        /// PyPI, with what they depend on (guest/python/requirements.txt is always installed).
        #[arg(long)]
        requirements: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = wit_world::forget_stale_runtime() {
        eprintln!("xtask: {e:#}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Cmd::Vm {
            timeout,
            memory,
            cpus,
            tcg,
            systemd,
            command,
        } => vm::run(
            &command,
            &vm::VmOptions {
                memory_mib: memory,
                cpus,
                timeout: Duration::from_secs(timeout),
                step: "vm".into(),
                writable: Vec::new(),
                tcg,
                systemd,
                stall: None,
                output: vm::Output::Live,
            },
        )
        .map(exit_code),
        Cmd::Test { kubernetes: false } => test().map(|()| ExitCode::SUCCESS),
        Cmd::Test { kubernetes: true } => kubernetes::cluster_test().map(|()| ExitCode::SUCCESS),
        Cmd::CheckDeploy => check_deploy().map(|()| ExitCode::SUCCESS),
        Cmd::Image { debug } => image::image(debug, None).map(|archive| {
            println!("{} ({})", image::IMAGE, archive.display());
            ExitCode::SUCCESS
        }),
        Cmd::Dist { debug } => dist::dist(debug, None).map(|deb| {
            println!("{}", deb.display());
            ExitCode::SUCCESS
        }),
        Cmd::Demo => demo().map(|()| ExitCode::SUCCESS),
        Cmd::Bench { args } => bench::bench(&args).map(|()| ExitCode::SUCCESS),
        Cmd::PythonGuest { requirements } => python_guest(requirements.as_deref()).map(|path| {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }),
        Cmd::NativePython { requirements, lock } => {
            if lock {
                native_python::relock().map(|()| ExitCode::SUCCESS)
            } else {
                native_python::native_python(requirements.as_deref()).map(|path| {
                    println!("{}", path.display());
                    ExitCode::SUCCESS
                })
            }
        }
        Cmd::Deny => deny::deny().map(|()| ExitCode::SUCCESS),
        Cmd::Kubernetes => kubernetes::kubernetes().map(|dir| {
            println!("{}", dir.display());
            ExitCode::SUCCESS
        }),
        Cmd::JsVendor => js_vendor().map(|()| ExitCode::SUCCESS),
        Cmd::Openapi => openapi().map(|()| ExitCode::SUCCESS),
        Cmd::Docs { check } => docs::docs(check).map(|()| ExitCode::SUCCESS),
        Cmd::PythonSdk => python_sdk()
            .and_then(|_| python_sdk_checks())
            .map(|()| ExitCode::SUCCESS),
        Cmd::Kvm => {
            let where_ = guest_host();
            println!("{}", where_.describe());
            Ok(ExitCode::SUCCESS)
        }
    };
    result.unwrap_or_else(|e| {
        eprintln!("xtask: {e:#}");
        ExitCode::FAILURE
    })
}

/// Writes the OpenAPI document the wire types generate; the api crate's unit test fails while
/// the checked-in one differs.
fn openapi() -> Result<()> {
    let path = workspace_root()?.join(hyperlightd_api::openapi::DOCUMENT_PATH);
    let text = serde_json::to_string_pretty(&hyperlightd_api::openapi::document())?;
    std::fs::write(&path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}

fn exit_code(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> Result<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

/// Where Hyperlight guests can run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GuestHost {
    /// On this host directly.
    Here(String),
    /// Only in the VM, for the reason given.
    Vm(String),
}

impl GuestHost {
    fn describe(&self) -> String {
        match self {
            GuestHost::Here(why) => format!("guests run on this host: {why}"),
            GuestHost::Vm(why) => format!("guests run only in the nested-KVM VM: {why}"),
        }
    }
}

/// Decides where guests run. `HYPERLIGHTD_VM=always|never` overrides the detection.
fn guest_host() -> GuestHost {
    match std::env::var("HYPERLIGHTD_VM").as_deref() {
        Ok("always") => return GuestHost::Vm("HYPERLIGHTD_VM=always".into()),
        Ok("never") => return GuestHost::Here("HYPERLIGHTD_VM=never".into()),
        _ => {}
    }
    if Path::new("/dev/mshv").exists() {
        return GuestHost::Here("/dev/mshv".into());
    }
    if !Path::new("/dev/kvm").exists() {
        return GuestHost::Vm("no /dev/kvm".into());
    }
    if Path::new("/sys/module/kvm_pvm").exists() {
        return GuestHost::Vm("/dev/kvm is kvm_pvm, which cannot run Hyperlight guests".into());
    }
    GuestHost::Here("/dev/kvm with hardware virtualisation".into())
}

/// Whether the build products `products` exist and `stamp` records `key`, the digest of the
/// inputs they were built from: then their build may be skipped. The build writes the stamp
/// last, once every step has succeeded.
fn built_from(stamp: &Path, key: &str, products: &[&Path]) -> bool {
    products.iter().all(|p| p.is_file())
        && std::fs::read_to_string(stamp).ok().as_deref() == Some(key)
}

/// Runs `command` as the step `name`, failing if it fails or outlives `limit`.
fn step(name: &str, command: &mut Command, limit: Duration) -> Result<()> {
    eprintln!("==> {name}");
    let started = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("step '{name}': starting {command:?}"))?;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("step '{name}' failed ({status})");
            }
            eprintln!(
                "==> {name}: done in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("step '{name}' timed out after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `command` on real KVM as the step `name`: here, or in the VM (its vCPUs run as `tcg`
/// says), where only the directories in `writable` can be written to.
fn on_kvm(
    name: &str,
    command: &[String],
    limit: Duration,
    writable: &[PathBuf],
    tcg: vm::Tcg,
) -> Result<()> {
    on_kvm_watched(name, command, limit, writable, tcg, None)
}

/// [`on_kvm`], the VM counted as broken (and the step run again) should it stall: print
/// nothing for `stall`, or its kernel report a stuck CPU.
fn on_kvm_watched(
    name: &str,
    command: &[String],
    limit: Duration,
    writable: &[PathBuf],
    tcg: vm::Tcg,
    stall: Option<Duration>,
) -> Result<()> {
    match guest_host() {
        GuestHost::Here(why) => {
            eprintln!("({name}: on this host, {why})");
            step(name, Command::new(&command[0]).args(&command[1..]), limit)
        }
        GuestHost::Vm(why) => {
            eprintln!(
                "==> {name} (in the nested-KVM VM, CPU {}: {why})",
                vm::cpu_model()
            );
            let options = vm::VmOptions {
                memory_mib: 10240,
                cpus: 2,
                timeout: limit,
                step: name.into(),
                writable: writable.to_vec(),
                tcg,
                systemd: false,
                stall,
                output: vm::Output::Live,
            };
            in_vm(name, command, &options)
        }
    }
}

/// Runs `command` in the VM as the step `name`, again if the VM broke (froze or panicked).
fn in_vm(name: &str, command: &[String], options: &vm::VmOptions) -> Result<()> {
    let started = Instant::now();
    // A VM that froze (outlived its limit, although every test inside carries time limits of
    // its own), stalled (see `vm::VmOptions::stall`) or whose kernel panicked broke by itself: that is the emulator (QEMU TCG with
    // nested KVM: soft lockups on the console, most often while a sandbox is being built, and
    // now and then a panic in the VM's scheduler). The step is run again, up to
    // BROKEN_VM_RETRIES times, and says so. A test that fails is never retried.
    let mut attempt = 0;
    let status = loop {
        let ran = vm::run(command, options);
        options.output.print();
        let error = match ran {
            Ok(status) => break status,
            Err(error) => error,
        };
        let Some(broke) = error.downcast_ref::<vm::VmBroke>() else {
            return Err(error);
        };
        if attempt == BROKEN_VM_RETRIES {
            return Err(error);
        }
        attempt += 1;
        eprintln!("{error:#}");
        eprintln!(
            "==> {name}: THE VM {} (the emulator, not a test); running the step again ({attempt}/{BROKEN_VM_RETRIES})",
            broke.what.to_uppercase()
        );
    };
    if status != 0 {
        bail!("step '{name}' failed in the VM (exit status {status})");
    }
    eprintln!(
        "==> {name}: done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    if let Ok(root) = workspace_root() {
        cmd.current_dir(root);
    }
    cmd
}

/// Builds the test binaries of the e2e package and returns the executable of each test target.
fn e2e_test_binaries() -> Result<Vec<(String, PathBuf)>> {
    eprintln!("==> build the end-to-end tests");
    let output = cargo()
        .args([
            "test",
            "-p",
            "hyperlightd-e2e",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !output.status.success() {
        bail!(
            "step 'build the end-to-end tests' failed ({})",
            output.status
        );
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || message["target"]["kind"][0] != "test" {
            continue;
        }
        if let (Some(name), Some(exe)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            binaries.push((name.to_owned(), PathBuf::from(exe)));
        }
    }
    Ok(binaries)
}

fn find_binary(binaries: &[(String, PathBuf)], name: &str) -> Result<PathBuf> {
    binaries
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.clone())
        .with_context(|| format!("no test target named {name} in hyperlightd-e2e"))
}

/// The debug binaries the end-to-end tests and the demo run, and the client's agent-loop
/// example, which the end-to-end tests run too.
fn build_daemon_and_hlctl() -> Result<()> {
    step(
        "build the daemon, hlctl and the agent-loop example",
        cargo().args([
            "build",
            "--bins",
            "--example",
            "agent_loop",
            "-p",
            "hyperlightd",
            "-p",
            "hlctl",
            "-p",
            "hyperlightd-client",
        ]),
        Duration::from_secs(1800),
    )
}

/// The virtual environment with the MCP client SDK that the end-to-end tests drive `hlctl mcp`
/// with (tests/mcp/requirements.txt), in target/mcp-client; rebuilt when the pins change.
fn mcp_client() -> Result<()> {
    pinned_virtualenv(
        "MCP client",
        &vm::target_dir()?.join("mcp-client"),
        &workspace_root()?.join("tests/mcp/requirements.txt"),
    )
}

fn test() -> Result<()> {
    check_js_vendor()?;
    test_js_runner()?;
    build_daemon_and_hlctl()?;
    let python = python_guest(None)?;
    python_guest_for_package_tests()?;
    native_python::native_python(None)?;
    test_wheels()?;
    mcp_client()?;
    npm_packages("MCP servers", "tests/mcp", "mcp-servers", &[])?;
    npm_packages(
        "E2B's JavaScript SDK",
        "tests/e2b-js",
        "e2b-js",
        &["e2b.test.mjs"],
    )?;
    python_sdk()?;
    step(
        "unit tests (host), with a short fuzzing pass of the HTTP layer",
        cargo()
            .args(["test", "--workspace", "--exclude", "hyperlightd-e2e"])
            // As the end-to-end crate builds the client (and clippy lints it): with its trace
            // propagation, whose unit test then runs.
            .args(["--features", "hyperlightd-client/opentelemetry"])
            .env("PROPTEST_CASES", FUZZ_CASES),
        Duration::from_secs(1800),
    )?;
    python_sdk_checks()?;
    check_deploy()?;
    let binaries = e2e_test_binaries()?;

    let startup = find_binary(&binaries, "startup")?;
    match guest_host() {
        GuestHost::Vm(why) if why.contains("kvm_pvm") => step(
            "end-to-end: startup refusal on a KVM that cannot run guests (host)",
            Command::new(&startup).env("HYPERLIGHTD_E2E_EXPECT_REFUSAL", "1"),
            Duration::from_secs(300),
        )?,
        other => eprintln!(
            "==> end-to-end: startup refusal: NOT RUN, this host has no KVM that fails to run guests ({})",
            other.describe()
        ),
    }

    // Eight tests per VM boot; the longest group of most targets takes about five minutes. The
    // daemons of one boot with the same settings share their templates (tests/src/lib.rs), so
    // only the first native Python daemon boots the guest and imports the scientific stack
    // (about 40 s under emulation); a native session's exec saves a GiB of guest memory (about
    // 10 s).
    let short = Duration::from_secs(600);
    let mut suites = Vec::new();
    for (target, what, limit) in [
        ("kvm", "daemon, client and hlctl", short),
        (
            "javascript_apis",
            "the JavaScript guest's everyday APIs",
            short,
        ),
        ("python", "the Python guest", short),
        (
            "python_library",
            "the Python guest's library and packages",
            short,
        ),
        (
            "native_python",
            "the native Python guest and its scientific stack",
            Duration::from_secs(1200),
        ),
        (
            "agents",
            "MCP, the agent tool and the OpenAPI contract",
            short,
        ),
        // Three of its tests restart daemons that save and load every session's state.
        ("sessions", "sessions", Duration::from_secs(900)),
        (
            "tools",
            "tool calls from code, in every language",
            Duration::from_secs(1200),
        ),
        (
            "python_sdk",
            "the Python client and its framework adapters",
            short,
        ),
    ] {
        let binary = find_binary(&binaries, target)?;
        suites.push(e2e::Suite::new(
            binary,
            format!("end-to-end: {what} on real KVM"),
            limit,
        ));
    }
    let deb = dist::dist(true, Some(python))?;
    let archive = image::from_package(&deb)?;
    e2e::run(&suites, vec![package_under_systemd(&deb, &archive)?])
}

/// The boot that installs the Debian package (debug build) in the VM booted with systemd and
/// runs `tests/systemd/package.sh` there (the unit started, a program run through its socket
/// as a member of its group, the unit stopped), then `tests/systemd/kube.sh` with the
/// container image made from the same package (two podman pods told apart by the service with
/// `--pod-identity`; the DaemonSet's pod played by `podman kube play`, with a client pod).
/// Always in the VM, even on a host with KVM: it installs a package and starts a service and
/// pods.
fn package_under_systemd(deb: &Path, archive: &Path) -> Result<e2e::Boot> {
    let repo = workspace_root()?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        r#"sh "$0" "$1" && sh "$2" "$3" "$4""#.to_owned(),
        path(&repo.join("tests/systemd/package.sh")),
        path(deb),
        path(&repo.join("tests/systemd/kube.sh")),
        path(archive),
        path(&repo),
    ];
    Ok(e2e::Boot::under_systemd(
        "end-to-end: the Debian package under systemd, the image under podman".into(),
        command,
        Duration::from_secs(1800),
    ))
}

/// Inputs per property in the fuzz test (daemon/tests/http_fuzz.rs) that `test` runs: a few
/// seconds. Its header says how to run a long pass.
const FUZZ_CASES: &str = "2000";

/// How many times a step whose VM broke (froze or panicked) is run again.
const BROKEN_VM_RETRIES: u32 = 2;

/// The names of the tests in a libtest binary (listing needs no KVM).
fn list_tests(binary: &Path) -> Result<Vec<String>> {
    let output = Command::new(binary)
        .args(["--list", "--format", "terse"])
        .output()
        .with_context(|| format!("listing the tests of {}", binary.display()))?;
    if !output.status.success() {
        bail!("listing the tests of {} failed", binary.display());
    }
    let tests: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_owned)
        .collect();
    if tests.is_empty() {
        bail!("{} lists no tests", binary.display());
    }
    Ok(tests)
}

fn demo() -> Result<()> {
    build_daemon_and_hlctl()?;
    let python = native_python::native_python(None)?;
    let root = workspace_root()?;
    let bin = vm::target_dir()?.join("debug");
    on_kvm(
        "demo",
        &[
            "sh".into(),
            root.join("scripts/demo.sh").to_string_lossy().into_owned(),
            bin.to_string_lossy().into_owned(),
            python.to_string_lossy().into_owned(),
        ],
        Duration::from_secs(900),
        &[],
        vm::Tcg::Single,
    )
}
