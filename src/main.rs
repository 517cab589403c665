//! The `itermem` command line: glue over the library's modules (see `cli` for the commands and
//! the exit codes).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
