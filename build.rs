//! Tells the `itermem` executable where cargo puts `libitermem.so`, so that it carries the
//! interposer inside itself (`src/cli/library.rs`): `cargo install` installs executables only,
//! and a wheel's command may be installed far from any library file.
//!
//! The library is the cdylib of this same package. Cargo builds a package's library target
//! (every crate type of it, one rustc invocation) before its executables, and an executable,
//! which links the library, starts only when that invocation has finished; so by the time
//! `src/main.rs` is compiled the cdylib is in `<profile dir>/deps/`, whose place follows from
//! `OUT_DIR` (`<profile dir>/build/itermem-<hash>/out`). `include_bytes!` records the file in
//! the executable's dependencies, so a new library rebuilds the executable.
//!
//! `cargo check` and `cargo clippy` link nothing: the cdylib may not exist then, and an empty
//! file stands in for it (an executable built that way carries no library and says so).

use std::env;
use std::fs::OpenOptions;
use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let profile_dir = out.ancestors().nth(3).filter(|_| {
        out.parent()
            .and_then(|p| p.parent())
            .and_then(|p| p.file_name())
            == Some("build".as_ref())
    });
    let library = match profile_dir {
        Some(dir) => dir.join("deps").join("libitermem.so"),
        None => {
            println!(
                "cargo::warning=unknown target directory layout ({}): the itermem executable \
                 will not carry libitermem.so",
                out.display()
            );
            out.join("no-libitermem.so")
        }
    };
    // Create it empty if absent (check builds), never truncate a real one.
    let created = library
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| OpenOptions::new().append(true).create(true).open(&library));
    if let Err(err) = created {
        panic!("cannot create {}: {err}", library.display());
    }
    // Not named ITERMEM_*: cargo sets it for the processes of `cargo test` too, and the
    // interposer in a program they start warns about an ITERMEM_* variable it does not know.
    println!(
        "cargo::rustc-env=INTERPOSER_CDYLIB_PATH={}",
        library.display()
    );
}
