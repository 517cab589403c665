//! Installed as users install it: `cargo install --path .`, and the wheel in a fresh virtual
//! environment, each run from a directory outside the checkout.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{program, root, say_skipped, scratch, stdout_ok};

/// A directory of its own for one test: the checkout is not beside it.
fn elsewhere(name: &str) -> PathBuf {
    let dir = scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    dir
}

/// `itermem run --shim --stats s.json -- mlp_train` with `itermem` at `command`, from `dir/work`
/// with its cache in `dir/cache`; the statistics, which must show a recorded run with the
/// iteration found.
fn run_mlp_train(command: &Path, dir: &Path) {
    let output = Command::new(command)
        .args(["run", "--shim", "--stats", "s.json", "--"])
        .arg(program("mlp_train"))
        .current_dir(dir.join("work"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env_remove("ITERMEM_MODE")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    stdout_ok(&output);
    let stats = support::read_json(&dir.join("work/s.json"));
    assert_eq!(stats["mode"], "record", "{stats}");
    assert!(stats["iterations"].as_u64().unwrap() >= 2, "{stats}");
}

/// The library `itermem library-path` names: in `dir/cache/itermem`, and the interposer.
fn assert_carried_library(printed: &str, dir: &Path) {
    let library = PathBuf::from(printed.trim());
    assert!(
        library.starts_with(dir.join("cache/itermem")),
        "{} is not in the cache",
        library.display()
    );
    let bytes = std::fs::read(&library).unwrap();
    assert!(
        bytes.starts_with(b"\x7fELF"),
        "{} is no ELF file",
        library.display()
    );
    let symbols = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&library)
        .output();
    if let Ok(symbols) = symbols {
        let symbols = stdout_ok(&symbols);
        assert!(
            symbols.contains(" itermem_malloc"),
            "no itermem_malloc in:\n{symbols}"
        );
    }
}

/// `cargo install --path . --root D`: `D/bin/itermem` alone, run from elsewhere. Path installs
/// build in the workspace's `target/`, so this shares the release build with the wheel's test.
#[test]
fn cargo_install_gives_a_command_that_carries_its_library() {
    let dir = elsewhere("cargo-install");
    let install = Command::new(env!("CARGO"))
        .args(["install", "--quiet", "--locked", "--path"])
        .arg(root())
        .arg("--root")
        .arg(dir.join("root"))
        .current_dir(dir.join("work"))
        .output()
        .unwrap();
    stdout_ok(&install);
    let installed: Vec<_> = std::fs::read_dir(dir.join("root/bin"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(
        installed,
        ["itermem"],
        "cargo install installs the command only"
    );
    let command = dir.join("root/bin/itermem");

    run_mlp_train(&command, &dir);
    let printed = Command::new(&command)
        .arg("library-path")
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .output()
        .unwrap();
    assert_carried_library(&stdout_ok(&printed), &dir);

    // Nowhere to write it: one line saying so, exit code 2.
    let output = Command::new(&command)
        .arg("library-path")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("HOME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("neither XDG_CACHE_HOME nor HOME is set"),
        "{stderr}"
    );
}

#[test]
fn the_wheel_installs_the_command_and_the_python_package() {
    let build = Command::new(root().join("tools/build-wheel"))
        .current_dir(root())
        .output()
        .expect("cannot run tools/build-wheel");
    let stderr = String::from_utf8_lossy(&build.stderr);
    if build.status.code() == Some(3) && stderr.contains("could not download maturin") {
        say_skipped(format_args!("PyPI is unreachable: {}", stderr.trim()));
        return;
    }
    stdout_ok(&build);
    let wheels: Vec<PathBuf> = std::fs::read_dir(root().join("target/wheels"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("itermem-") && name.ends_with(".whl")
        })
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let name = wheels[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // maturin tags the wheel with the oldest glibc its executable's symbols allow.
    let prefix = format!("itermem-{}-py3-none-manylinux_", env!("CARGO_PKG_VERSION"));
    assert!(
        name.starts_with(&prefix) && name.ends_with("_x86_64.whl"),
        "{name}"
    );

    let dir = elsewhere("wheel");
    let venv = dir.join("venv");
    stdout_ok(
        &Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .output()
            .unwrap(),
    );
    stdout_ok(
        &Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--no-index",
                "--disable-pip-version-check",
            ])
            .arg(&wheels[0])
            .output()
            .unwrap(),
    );

    run_mlp_train(&venv.join("bin/itermem"), &dir);

    let python = |args: &[&str]| {
        Command::new(venv.join("bin/python"))
            .args(args)
            .current_dir(dir.join("work"))
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .output()
            .unwrap()
    };
    let help = stdout_ok(&python(&["-m", "itermem", "--help"]));
    assert!(help.contains("Usage: itermem"), "{help}");
    let printed = stdout_ok(&python(&[
        "-c",
        "import itermem; print(itermem.library_path())",
    ]));
    assert_carried_library(&printed, &dir);

    // No torch in this environment: a clear error, not an ImportError from deep inside.
    let output = python(&["-c", "import itermem.torch; itermem.torch.use(mode='pool')"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("RuntimeError: itermem.torch.use() needs PyTorch, which is not installed"),
        "{stderr}"
    );
}
