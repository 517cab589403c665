//! `itermem report` and `itermem run --report`: the page of a swap-mode run, opened in a real
//! (headless) browser, shows the limit, the pool, the swaps and the per-iteration numbers of the
//! run's statistics, with nothing on the console; it loads nothing from anywhere; `run
//! --report` reads the files the program wrote (`%p` included) and leaves no temporary ones; a
//! large real recording makes a page of bounded size; bad inputs are refused by name, and a
//! failed program keeps its exit code.

mod support;

use std::path::Path;
use std::process::Command;

use support::browser::{attribute, browser, element, render};
use support::{itermem, program, read_json, real_trace, run_under_itermem, scratch, stdout_ok};

/// `mlp_train`'s iteration needs 9,833,728 bytes; the demo's device and limit hold 6,000,000.
const LIMIT: &str = "6000000";

/// The number a cell or label shows first: `4,194,304 B (4.0 MiB)` → 4194304.
fn leading_number(text: &str) -> f64 {
    let digits: String = text
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .filter(|&c| c != ',')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number in {text:?}"))
}

/// A duration as the page shows it (`2.6 µs`, `130.4 ms`), in nanoseconds, and the rounding
/// the shown digits allow.
fn shown_ns(text: &str) -> (f64, f64) {
    let value = leading_number(text);
    let decimals = text
        .split_whitespace()
        .next()
        .unwrap()
        .split('.')
        .nth(1)
        .map_or(0, str::len);
    let unit = match text.split_whitespace().nth(1) {
        Some("ns") => 1.0,
        Some("µs") => 1e3,
        Some("ms") => 1e6,
        Some("s") => 1e9,
        other => panic!("no unit in {text:?}: {other:?}"),
    };
    (value * unit, 0.5 * unit / 10f64.powi(decimals as i32))
}

/// The `<td>` texts of each `<tr>` in `html`.
fn rows(html: &str) -> Vec<Vec<(Option<String>, String)>> {
    html.split("<tr")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let key = attribute(cell, "data-key").map(str::to_string);
                    let text = &cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()];
                    (key, text.to_string())
                })
                .collect()
        })
        .collect()
}

fn text_of(dom: &str, id: &str) -> String {
    element(dom, id)
        .unwrap_or_else(|| panic!("no #{id} in the page"))
        .1
        .to_string()
}

#[test]
fn the_report_of_a_swap_run_shows_the_limit_the_pool_the_swaps_and_the_iterations_in_a_browser() {
    let Some(browser) = browser() else { return };
    let mlp = program("mlp_train");
    let (stats_path, plan_path, page) = (
        scratch("report-stats.json"),
        scratch("report-plan.json"),
        scratch("report").with_extension("html"),
    );
    // No --trace: the run's trace goes to a temporary directory, removed afterwards.
    let tmp = scratch("report-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let output = run_under_itermem(
        &[
            "--mode",
            "swap",
            "--limit",
            LIMIT,
            "--stats",
            stats_path.to_str().unwrap(),
            "--plan-out",
            plan_path.to_str().unwrap(),
            "--report",
            page.to_str().unwrap(),
        ],
        &[mlp.to_str().unwrap(), "--iters", "10"],
        &[
            ("CUDA_SHIM_DEVICE_MEMORY", LIMIT),
            ("TMPDIR", tmp.to_str().unwrap()),
        ],
    );
    stdout_ok(&output);
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "left behind");
    std::fs::remove_dir(&tmp).unwrap();
    let stats = read_json(&stats_path);
    let swap = &stats["swap"];
    assert!(swap["swaps_planned"].as_u64().unwrap() > 0, "{stats:#}");

    let html = std::fs::read_to_string(&page).unwrap();
    for loads in ["src=", "href=", "@import", "url("] {
        assert!(!html.contains(loads), "the page loads something ({loads})");
    }

    let rendered = render(&browser, &page);
    assert_eq!(rendered.console, Vec::<String>::new(), "console messages");
    let dom = &rendered.dom;
    assert!(
        dom.contains("<body data-rendered=\"yes\">"),
        "the script did not finish drawing:\n{dom}"
    );

    // The summary: the recording's peak is the statistics' peak.
    let peak = text_of(dom, "card-peak");
    assert_eq!(
        leading_number(&peak),
        stats["peak_live_bytes"].as_f64().unwrap()
    );

    // The limit line, above the pool's footprint line.
    assert_eq!(text_of(dom, "limit-label"), "limit 6,000,000 B");
    let pool_bytes = stats["pool"]["pool_bytes"].as_u64().unwrap();
    assert_eq!(
        leading_number(text_of(dom, "pool-label").trim_start_matches("pool ")),
        pool_bytes as f64
    );
    let y = |id: &str| -> f64 {
        let (tag, _) = element(dom, id).unwrap_or_else(|| panic!("no #{id}"));
        attribute(tag, "y1").unwrap().parse().unwrap()
    };
    assert!(pool_bytes < 6_000_000);
    assert!(
        y("limit-line") < y("pool-line"),
        "the limit is drawn above the pool"
    );

    // One bar per copy the run made under the plan of the plan file, out and back (every
    // iteration ran its plan; a second plan, if one replaced the first, is the file's).
    let bars = |id: &str| text_of(dom, id).matches("<rect").count() as u64;
    let last = swap["plans_made"].as_array().unwrap().len() as u64 - 1;
    let under_last = |key: &str| -> u64 {
        (swap["iterations"].as_array().unwrap().iter())
            .filter(|i| i["plan"] == last)
            .map(|i| i[key].as_u64().unwrap())
            .sum()
    };
    assert_eq!(bars("swap-out"), under_last("swapped_out"));
    assert_eq!(bars("swap-in"), under_last("swapped_in"));
    // The first iteration under that plan alone: the plan's swaps, each out and back (none
    // where the run ended before one: a second plan installed at its last boundary).
    let planned = swap["swaps_planned"].as_u64().unwrap();
    let ran = (swap["iterations"].as_array().unwrap().iter()).any(|i| i["plan"] == last);
    match ran {
        true => assert_eq!((bars("zoom-out"), bars("zoom-in")), (planned, planned)),
        false => assert!(element(dom, "zoom-out").is_none(), "a zoom of no iteration"),
    }

    // The per-iteration table holds the statistics' numbers.
    let table = text_of(dom, "iterations");
    let body = &table[table.find("<tbody>").unwrap()..table.find("</tbody>").unwrap()];
    let shown = rows(body);
    let iterations = swap["iterations"].as_array().unwrap();
    assert_eq!(shown.len(), iterations.len());
    for (row, expected) in shown.iter().zip(iterations) {
        for (key, text) in row {
            let Some(key) = key else { continue };
            let want = expected[key.as_str()].as_f64().unwrap();
            if key.ends_with("_ns") {
                let (ns, rounding) = shown_ns(text);
                assert!(
                    (ns - want).abs() <= rounding,
                    "{key}: shown {text}, stats {want}"
                );
            } else {
                assert_eq!(leading_number(text), want, "{key}: shown {text}");
            }
        }
    }

    // What the run cost: the hooks counted in the statistics.
    let cost = text_of(dom, "cost");
    let hooked = cost
        .split("<tr")
        .find(|row| row.contains("data-key=\"hooked_calls\""))
        .expect("a hooked_calls row");
    let cell = &hooked[hooked.find("<td>").unwrap() + 4..hooked.find("</td>").unwrap()];
    assert_eq!(
        leading_number(cell),
        stats["hooked_calls"].as_f64().unwrap()
    );

    for path in [stats_path, plan_path, page] {
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn the_report_of_a_run_reads_the_trace_its_process_wrote_under_percent_p() {
    let mlp = program("mlp_train");
    let dir = scratch("report-pid");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let output = run_under_itermem(
        &[
            "--trace",
            dir.join("run-%p.itrace").to_str().unwrap(),
            "--report",
            page.to_str().unwrap(),
        ],
        &[mlp.to_str().unwrap(), "--iters", "3"],
        &[],
    );
    stdout_ok(&output);
    let traces: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".itrace"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    assert_ne!(traces[0], "run-%p.itrace");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!("<title>itermem report: {}</title>", traces[0])),
        "the report is not of {}",
        traces[0]
    );
    // No --stats given: the run's statistics, written to a temporary file, give the costs;
    // record mode swaps nothing, and the page says where per-iteration swaps come from.
    assert!(html.contains("<tr data-key=\"hooked_calls\">"));
    assert!(html.contains("id=\"iterations-absent\""));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_large_real_recording_makes_a_page_of_bounded_size_that_renders_without_errors() {
    let Some(recording) = real_trace("kineto/hta_v100_ddp_rank1_profile_memory.json.gz") else {
        return;
    };
    let Some(browser) = browser() else { return };
    let page = scratch("report-large").with_extension("html");
    let output = Command::new(itermem())
        .arg("report")
        .arg(&recording)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    stdout_ok(&output);
    // 13,385 allocations over 51 MB of JSON: the page holds at most its bounded aggregates.
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 1 << 20, "{size} bytes");
    let rendered = render(&browser, &page);
    assert_eq!(rendered.console, Vec::<String>::new(), "console messages");
    assert!(rendered.dom.contains("<body data-rendered=\"yes\">"));
    let drawn = text_of(&rendered.dom, "placement-rects")
        .matches("<rect")
        .count();
    assert_eq!(
        drawn, 5000,
        "the largest allocations, as many as the page draws"
    );
    std::fs::remove_file(page).unwrap();
}

/// `itermem report args…`.
fn report(args: &[&Path]) -> std::process::Output {
    Command::new(itermem())
        .arg("report")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn missing_or_malformed_inputs_are_refused_by_name() {
    let missing = scratch("no-such-trace.itrace");
    let output = report(&[&missing]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no-such-trace.itrace"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let trace = scratch("report-errors.itrace");
    let mlp = program("mlp_train");
    stdout_ok(&run_under_itermem(
        &["--trace", trace.to_str().unwrap()],
        &[mlp.to_str().unwrap(), "--iters", "3"],
        &[],
    ));
    let bad = scratch("report-bad-stats.json");
    std::fs::write(&bad, "{\"hooked_calls\": 3}").unwrap();
    let output = report(&[&trace, Path::new("--stats"), &bad]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("report-bad-stats.json")
            && stderr.contains("not an itermem statistics file"),
        "{stderr}"
    );
    for path in [trace, bad] {
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn a_run_with_nothing_to_report_says_so_and_a_failed_program_keeps_its_exit_code() {
    let page = scratch("report-none").with_extension("html");
    let run = |script: &str| {
        run_under_itermem(
            &["--report", page.to_str().unwrap()],
            &["sh", "-c", script],
            &[],
        )
    };
    let output = run("exit 7");
    assert_eq!(output.status.code(), Some(7));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("itermem: no report: the program wrote no trace"),
        "{stderr}"
    );
    let output = run("exit 0");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the program wrote no trace"), "{stderr}");
    assert!(!page.exists());
}
