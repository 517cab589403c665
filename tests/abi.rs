//! The simulated platform's exports, and the interposer's hooks, have NVIDIA's exact CUDA 12 and
//! CUDA 13 ABI: `tools/abi-check` compares our headers (`cuda-shim/include` and
//! `cuda-shim/include13`) and libraries (`libcudart.so.12`, `libcudart.so.13`, `libcuda.so.1`)
//! with NVIDIA's official headers and runtimes of both majors (fetched from PyPI into a cache
//! outside the repository; see the script).

mod support;

#[test]
fn exports_match_nvidia_cuda_12_and_13_headers() {
    support::program("shim_checks"); // builds the shim
    // The interposer this test run built (cargo test leaves the cdylib in deps/).
    let itermem = std::path::Path::new(env!("CARGO_BIN_EXE_itermem"));
    let lib = itermem.with_file_name("deps").join("libitermem.so");
    let lib = if lib.is_file() {
        lib
    } else {
        itermem.with_file_name("libitermem.so")
    };
    let output = std::process::Command::new(support::root().join("tools/abi-check"))
        .env("ITERMEM_LIB", lib)
        .current_dir(support::root())
        .output()
        .expect("cannot run tools/abi-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "tools/abi-check failed:\n{stdout}{stderr}"
    );
    assert!(stdout.contains("abi-check: OK"), "{stdout}");
    for major in ["CUDA 12", "CUDA 13"] {
        assert!(
            stdout.contains(&format!("abi-check: {major}: libitermem.so: ")),
            "{major} not checked:\n{stdout}"
        );
    }
}
