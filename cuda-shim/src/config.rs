//! The simulated device's settings, read once from `CUDA_SHIM_*` environment variables.
//!
//! A malformed value is reported on stderr with the variable, the value and the accepted form,
//! and the default is kept: a typo must not silently change what a test measures, nor kill it.

use std::time::Duration;

/// Validated settings of the simulated device.
#[derive(Clone, Debug)]
pub struct Config {
    /// `CUDA_SHIM_DEVICE_MEMORY`: capacity in bytes (default 8 GiB).
    pub capacity: u64,
    /// `CUDA_SHIM_H2D_GBPS`: simulated host-to-device bandwidth in GB/s (None = instant).
    pub h2d_gbps: Option<f64>,
    /// `CUDA_SHIM_D2H_GBPS`: simulated device-to-host bandwidth in GB/s (None = instant).
    pub d2h_gbps: Option<f64>,
    /// `CUDA_SHIM_JITTER_US`: upper bound of the random delay before each stream operation.
    pub jitter: Duration,
    /// `CUDA_SHIM_SEED`: seed of the delays, so a failing interleaving can be replayed.
    pub seed: u64,
    /// `CUDA_SHIM_STATS`: path of the JSON statistics written at process exit.
    pub stats_path: Option<String>,
}

pub const DEFAULT_CAPACITY: u64 = 8 << 30;

impl Config {
    pub fn from_env() -> Config {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Builds the configuration from any variable source (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Config {
        let read = |name: &str, form: &str, parse: &dyn Fn(&str) -> Option<Setting>| {
            let raw = lookup(name)?;
            let parsed = parse(raw.trim());
            if parsed.is_none() {
                eprintln!("cuda-shim: ignoring {name}={raw:?}: expected {form}");
            }
            parsed
        };
        let bytes = |s: &str| parse_bytes(s).filter(|&b| b > 0).map(Setting::Int);
        let rate = |s: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && *r > 0.0)
                .map(Setting::Float)
        };
        let int = |s: &str| s.parse::<u64>().ok().map(Setting::Int);
        let size_form = "a positive size in bytes with an optional K, M, G or T suffix (e.g. 8G)";
        let rate_form = "a positive number of GB/s (e.g. 12.5)";
        Config {
            capacity: read("CUDA_SHIM_DEVICE_MEMORY", size_form, &bytes)
                .map_or(DEFAULT_CAPACITY, Setting::int),
            h2d_gbps: read("CUDA_SHIM_H2D_GBPS", rate_form, &rate).map(Setting::float),
            d2h_gbps: read("CUDA_SHIM_D2H_GBPS", rate_form, &rate).map(Setting::float),
            jitter: read(
                "CUDA_SHIM_JITTER_US",
                "a whole number of microseconds",
                &int,
            )
            .map_or(Duration::ZERO, |s| Duration::from_micros(s.int())),
            seed: read("CUDA_SHIM_SEED", "a whole number", &int).map_or(0, Setting::int),
            stats_path: lookup("CUDA_SHIM_STATS").filter(|p| !p.is_empty()),
        }
    }
}

enum Setting {
    Int(u64),
    Float(f64),
}

impl Setting {
    fn int(self) -> u64 {
        match self {
            Setting::Int(v) => v,
            Setting::Float(v) => v as u64,
        }
    }
    fn float(self) -> f64 {
        match self {
            Setting::Int(v) => v as f64,
            Setting::Float(v) => v,
        }
    }
}

/// Parses `123`, `64K`, `512M`, `8G`, `1T` (binary multiples, optional `B`/`iB`), with overflow
/// checked.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let upper = text.to_ascii_uppercase();
    let trimmed = upper.trim_end_matches("IB").trim_end_matches('B');
    let (digits, shift) = match trimmed.chars().last()? {
        'K' => (&trimmed[..trimmed.len() - 1], 10),
        'M' => (&trimmed[..trimmed.len() - 1], 20),
        'G' => (&trimmed[..trimmed.len() - 1], 30),
        'T' => (&trimmed[..trimmed.len() - 1], 40),
        _ => (trimmed, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()?
        .checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Config {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn sizes_accept_suffixes_and_reject_garbage() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64K"), Some(64 << 10));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("8g"), Some(8 << 30));
        assert_eq!(parse_bytes("12Q"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("99999999999T"), None, "overflow is an error");
    }

    #[test]
    fn defaults_and_bad_values_keep_defaults() {
        let c = config(&[]);
        assert_eq!(c.capacity, DEFAULT_CAPACITY);
        assert_eq!(c.jitter, Duration::ZERO);
        assert!(c.h2d_gbps.is_none());
        let c = config(&[
            ("CUDA_SHIM_DEVICE_MEMORY", "lots"),
            ("CUDA_SHIM_H2D_GBPS", "-3"),
        ]);
        assert_eq!(c.capacity, DEFAULT_CAPACITY);
        assert!(c.h2d_gbps.is_none());
    }

    #[test]
    fn good_values_are_taken() {
        let c = config(&[
            ("CUDA_SHIM_DEVICE_MEMORY", "1G"),
            ("CUDA_SHIM_D2H_GBPS", "12.5"),
            ("CUDA_SHIM_JITTER_US", "50"),
            ("CUDA_SHIM_SEED", "7"),
            ("CUDA_SHIM_STATS", "/tmp/s.json"),
        ]);
        assert_eq!(c.capacity, 1 << 30);
        assert_eq!(c.d2h_gbps, Some(12.5));
        assert_eq!(c.jitter, Duration::from_micros(50));
        assert_eq!(c.seed, 7);
        assert_eq!(c.stats_path.as_deref(), Some("/tmp/s.json"));
    }
}
