//! `itermem report`: the HTML page of a run (`src/report/`), written to a file.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::InputArgs;
use super::progress::Progress;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The recording: an itermem trace (`--trace`), or any format `compare` reads.
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// The run's statistics (`itermem run --stats`): limit, pool, per-iteration swaps, costs.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// The swap plan the run used (`itermem run --plan-out`), to draw its copies.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Where to write the page.
    #[arg(long, short, value_name = "FILE", default_value = "report.html")]
    output: PathBuf,
    #[command(flatten)]
    input: InputArgs,
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    write(
        &args.trace,
        args.stats.as_deref(),
        args.plan.as_deref(),
        &args.output,
        &args.input,
    )
}

/// Builds the report of `trace` (with `stats` and `plan` where given) and writes it to `output`
/// (also what `itermem run --report` calls once the program has exited).
pub fn write(
    trace: &Path,
    stats: Option<&Path>,
    plan: Option<&Path>,
    output: &Path,
    input: &InputArgs,
) -> anyhow::Result<()> {
    let inputs = itermem::report::Inputs {
        recording: trace,
        stats,
        plan,
        import: input.import_options(),
    };
    // One step: reading and aggregating a large recording takes seconds, and the bar (on a
    // terminal, after a second) shows its time passing.
    let bar = Progress::new("report", 1);
    let report = itermem::report::build(&inputs)?;
    bar.set(1);
    std::fs::write(output, itermem::report::render(&report))
        .with_context(|| format!("cannot write {}", output.display()))
}
