//! A real browser for the tests that check what a page shows: headless Chromium, found or
//! installed by `tools/install-browser` (the distribution's package, as CI installs its tools).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{root, say_skipped, scratch};

/// The longest a page may take to load and render before the test fails (a hang guard, not a
/// measurement: a page that renders renders in well under a second).
const PAGE_TIMEOUT: Duration = Duration::from_secs(120);

/// The browser, or `None` after one `SKIPPED` line when none is installed and none can be.
pub fn browser() -> Option<PathBuf> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let output = Command::new(root().join("tools/install-browser"))
            .stdin(Stdio::null())
            .output()
            .expect("cannot run tools/install-browser");
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        match output.status.code() {
            Some(0) => Ok(PathBuf::from(stdout.lines().last().unwrap_or_default())),
            Some(3) => Err(stdout),
            _ => panic!(
                "tools/install-browser failed ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    });
    match found {
        Ok(path) => Some(path.clone()),
        Err(why) => {
            say_skipped(format_args!("{}", why.trim_start_matches("SKIPPED: ")));
            None
        }
    }
}

/// What the browser made of a page.
pub struct Rendered {
    /// The DOM after the page's scripts ran, serialised.
    pub dom: String,
    /// Every message the page wrote to the console (script errors included).
    pub console: Vec<String>,
}

/// Opens `page` in headless `browser` with a profile of its own, lets it load and run its
/// scripts, and returns the DOM and the console.
pub fn render(browser: &Path, page: &Path) -> Rendered {
    let profile = scratch(&format!(
        "browser-{}",
        page.file_name().unwrap().to_string_lossy()
    ));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).unwrap();
    let (dom_path, log_path) = (profile.join("dom.html"), profile.join("stderr.log"));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            // Virtual time runs the page's timers and scripts to completion before the dump.
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.join("profile").display()
        ))
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dom_path).unwrap())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", browser.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > PAGE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not render {} in {PAGE_TIMEOUT:?}",
                browser.display(),
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let dom = std::fs::read_to_string(&dom_path).unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        status.success(),
        "{} failed ({status}):\n{log}",
        browser.display()
    );
    // Chromium logs each console message as `…:CONSOLE:<line>] "<message>", source: …`.
    let console = log
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    std::fs::remove_dir_all(&profile).unwrap();
    Rendered { dom, console }
}

/// The element of `dom` with id `id`: its start tag and what lies between it and its end tag
/// (the elements the tests look up do not nest inside one of their own kind).
pub fn element<'a>(dom: &'a str, id: &str) -> Option<(&'a str, &'a str)> {
    let at = dom.find(&format!(" id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let tag_end = start + dom[start..].find('>')?;
    let name: String = dom[start + 1..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let close = format!("</{name}>");
    let inner_end = tag_end + 1 + dom[tag_end + 1..].find(&close)?;
    Some((&dom[start..=tag_end], &dom[tag_end + 1..inner_end]))
}

/// The value of attribute `name` in a start tag.
pub fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(&tag[at..at + tag[at..].find('"')?])
}
