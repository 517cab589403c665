//! `itermem run --shim` and `tools/with-shim` win against RPATH: a program whose RPATH names a
//! directory holding another `libcudart.so.12` (as torch's libraries name NVIDIA's in the
//! venv) still gets the shim's runtime, because the shim is preloaded, and that other copy is
//! never even loaded. The stand-in runtime and the program are built here, by the test.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{read_json, root, run_on_shim, run_under_itermem, scratch, shim_lib_dir, stdout_ok};

/// What the stand-in's every function returns: a code the shim never does.
const STANDIN_ERROR: &str = "4242";

const STANDIN: &str = r#"
/* A stand-in for NVIDIA's libcudart.so.12 that fails every call with one distinctive code. */
int cudaMalloc(void **ptr, unsigned long size) { (void)ptr; (void)size; return 4242; }
int cudaFree(void *ptr) { (void)ptr; return 4242; }
"#;

/// NVIDIA's runtime versions its symbols, so the program asks for `cudaMalloc@libcudart.so.12`.
const STANDIN_MAP: &str = "libcudart.so.12 { global: cudaMalloc; cudaFree; local: *; };\n";

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cudaMalloc(void **ptr, unsigned long size);
int cudaFree(void *ptr);

/* argv[1]: the stand-in's path. Prints what each call returned and whether the stand-in is
 * mapped into the process. */
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    void *ptr = 0;
    printf("cudaMalloc=%d\n", cudaMalloc(&ptr, 4096));
    printf("cudaFree=%d\n", cudaFree(ptr));
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return 2;
    char line[4096];
    int mapped = 0;
    while (fgets(line, sizeof line, maps))
        if (strstr(line, argv[1])) mapped = 1;
    fclose(maps);
    printf("standin_mapped=%d\n", mapped);
    const char *preload = getenv("LD_PRELOAD");
    printf("LD_PRELOAD=%s\n", preload ? preload : "");
    return 0;
}
"#;

fn cc(args: &[&str]) {
    let output = Command::new("cc")
        .args(args)
        .output()
        .expect("cannot run cc");
    assert!(
        output.status.success(),
        "cc {args:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Builds the stand-in runtime into `dir/` and a program linked to it with an RPATH (not
/// RUNPATH) naming `dir/`; returns the program.
fn build(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(dir.join("standin.c"), STANDIN).unwrap();
    std::fs::write(dir.join("standin.map"), STANDIN_MAP).unwrap();
    std::fs::write(dir.join("program.c"), PROGRAM).unwrap();
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &path("libcudart.so.12"),
        "-Wl,-soname,libcudart.so.12",
        &format!("-Wl,--version-script={}", path("standin.map")),
        &path("standin.c"),
    ]);
    cc(&[
        "-o",
        &path("program"),
        &path("program.c"),
        &format!("-L{}", dir.display()),
        "-l:libcudart.so.12",
        &format!("-Wl,--disable-new-dtags,-rpath,{}", dir.display()),
    ]);
    dir.join("program")
}

#[test]
fn a_program_whose_rpath_names_another_runtime_gets_the_shims() {
    let dir = scratch("rpath");
    let program = build(&dir);
    let standin = dir.join("libcudart.so.12");
    let standin = standin.to_str().unwrap();

    // The premise: on the library path alone, RPATH wins and the stand-in answers.
    let plain = stdout_ok(&run_on_shim(&program, &[standin], &[]));
    assert_eq!(
        support::value_of(&plain, "cudaMalloc"),
        Some(STANDIN_ERROR),
        "{plain}"
    );
    assert_eq!(
        support::value_of(&plain, "standin_mapped"),
        Some("1"),
        "{plain}"
    );

    // itermem run --shim: the shim's runtime, seen by itermem, after the user's own preload.
    let stats = scratch("rpath-stats.json");
    let run = stdout_ok(&run_under_itermem(
        &["--stats", stats.to_str().unwrap()],
        &[program.to_str().unwrap(), standin],
        &[("LD_PRELOAD", "libm.so.6")],
    ));
    assert_eq!(support::value_of(&run, "cudaMalloc"), Some("0"), "{run}");
    assert_eq!(support::value_of(&run, "cudaFree"), Some("0"), "{run}");
    assert_eq!(
        support::value_of(&run, "standin_mapped"),
        Some("0"),
        "{run}"
    );
    let shim = shim_lib_dir();
    let itermem_lib = itermem::interposer::library_beside(Path::new(support::itermem()));
    let expected = format!(
        "{} libm.so.6 {} {}",
        itermem_lib.display(),
        shim.join("libcudart.so.12").display(),
        shim.join("libcuda.so.1").display()
    );
    assert_eq!(
        support::value_of(&run, "LD_PRELOAD"),
        Some(expected.as_str())
    );
    let summary = read_json(&stats);
    assert_eq!(summary["events"]["malloc"], 1, "{summary:#}");
    assert_eq!(summary["events"]["free"], 1, "{summary:#}");

    // tools/with-shim: the shim's runtime too.
    let output = Command::new(root().join("tools/with-shim"))
        .args([program.to_str().unwrap(), standin])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let with_shim = stdout_ok(&output);
    assert_eq!(
        support::value_of(&with_shim, "cudaMalloc"),
        Some("0"),
        "{with_shim}"
    );
    assert_eq!(
        support::value_of(&with_shim, "standin_mapped"),
        Some("0"),
        "{with_shim}"
    );

    std::fs::remove_file(&stats).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
