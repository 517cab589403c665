//! Writes a generated Child-Sum Tree-LSTM training iteration (`itermem::ops::tree`: thousands of
//! tensors, none of 1 MiB) as a gzip-compressed DTR op log, for `itermem plan` to read like the
//! shared logs:
//!
//! ```sh
//! cargo run --release --example tree_lstm_log -- --seed 1 /tmp/tree-lstm-1.log.gz
//! target/release/itermem plan --sweep --bandwidth pcie3 /tmp/tree-lstm-1.log.gz
//! ```
//!
//! `tree_lstm_log [--seed N] OUT`: the default shape (`TreeLstm::default()`), seed 1 unless
//! given. Exits 2 on bad usage, 1 when the file cannot be written.

use std::io::Write;
use std::process::ExitCode;

use flate2::Compression;
use flate2::write::GzEncoder;
use itermem::ops::{to_dtr_log, tree};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (seed, out) = match args.as_slice() {
        [out] => (Some(1), out),
        [flag, seed, out] if flag == "--seed" => (seed.parse().ok(), out),
        _ => (None, &String::new()),
    };
    let Some(seed) = seed.filter(|_| !out.is_empty()) else {
        eprintln!("usage: tree_lstm_log [--seed N] OUT.log.gz");
        return ExitCode::from(2);
    };
    let trace = tree::tree_lstm_iteration(seed, &tree::TreeLstm::default());
    let log = match to_dtr_log(&trace) {
        Ok(log) => log,
        Err(err) => {
            eprintln!("internal error: the generated iteration is not a DTR log: {err}");
            return ExitCode::from(1);
        }
    };
    let written = std::fs::File::create(out).and_then(|file| {
        let mut gz = GzEncoder::new(file, Compression::default());
        gz.write_all(log.as_bytes())?;
        gz.finish().map(drop)
    });
    if let Err(err) = written {
        eprintln!("cannot write {out}: {err}");
        return ExitCode::from(1);
    }
    let peak = trace.peak().map_or(0, |p| p.bytes);
    let largest = trace.tensors.iter().map(|t| t.bytes).max().unwrap_or(0);
    println!(
        "{out}: {} ops, {} tensors (largest {largest} B), peak {peak} B",
        trace.ops.len(),
        trace.tensors.len()
    );
    ExitCode::SUCCESS
}
