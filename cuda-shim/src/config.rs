//! The simulated device's settings, read once from `CUDA_SHIM_*` environment variables.
//!
//! A malformed value is reported on stderr with the variable, the value and the accepted form,
//! and the default is kept: a typo must not silently change what a test measures, nor kill it.

use std::time::Duration;

/// Validated settings of the simulated device.
#[derive(Clone, Debug)]
pub struct Config {
    /// `CUDA_SHIM_DEVICES`: number of simulated devices (default 1, at most [`MAX_DEVICES`]).
    pub devices: usize,
    /// `CUDA_SHIM_DEVICE_MEMORY`: capacity in bytes of each device, one entry per device (default
    /// 8 GiB each). One size applies to every device; a comma-separated list gives one per device.
    pub capacities: Vec<u64>,
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
    /// `CUDA_SHIM_COMPUTE_CAPABILITY`: the devices' compute capability as `10 × major + minor`
    /// (written `9.0`; default 9.0, Hopper). It decides which PTX of a fatbinary runs.
    pub compute_capability: u32,
    /// `CUDA_SHIM_VMM_GRANULARITY`: the granularity of the virtual memory API (default 2 MiB,
    /// NVIDIA's; a power of two from 4 KiB, the host's page, to 1 GiB).
    pub vmm_granularity: usize,
}

/// Compute capability of the simulated devices unless `CUDA_SHIM_COMPUTE_CAPABILITY` says
/// otherwise: Hopper's 9.0, the GPUs this project is lent.
pub const DEFAULT_COMPUTE_CAPABILITY: u32 = 90;

pub const DEFAULT_CAPACITY: u64 = 8 << 30;
/// Most devices the shim simulates (`CUDA_SHIM_DEVICES`).
pub const MAX_DEVICES: usize = 16;

/// Minimum and recommended granularity of physical allocations and mappings of the virtual
/// memory API by default (2 MiB, as on NVIDIA's GPUs; `CUDA_SHIM_VMM_GRANULARITY` sets another,
/// so that a replay scaled down keeps its tensors' sizes in granules).
pub const GRANULARITY: usize = 2 << 20;

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
        let rate = |s: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && *r > 0.0)
                .map(Setting::Float)
        };
        let int = |s: &str| s.parse::<u64>().ok().map(Setting::Int);
        let capability = |s: &str| {
            let (major, minor) = s.split_once('.')?;
            let (major, minor) = (major.parse::<u64>().ok()?, minor.parse::<u64>().ok()?);
            ((1..=99).contains(&major) && minor <= 9).then_some(Setting::Int(major * 10 + minor))
        };
        let size_form = "a positive size in bytes with an optional K, M, G or T suffix (e.g. 8G)";
        let rate_form = "a positive number of GB/s (e.g. 12.5)";
        let count = |s: &str| {
            s.parse::<u64>()
                .ok()
                .filter(|&n| (1..=MAX_DEVICES as u64).contains(&n))
                .map(Setting::Int)
        };
        let devices = read(
            "CUDA_SHIM_DEVICES",
            &format!("a whole number of devices from 1 to {MAX_DEVICES}"),
            &count,
        )
        .map_or(1, |s| s.int() as usize);
        let sizes = |s: &str| {
            let list: Option<Vec<u64>> = s
                .split(',')
                .map(|one| parse_bytes(one.trim()).filter(|&b| b > 0))
                .collect();
            list.filter(|l| l.len() == 1 || l.len() == devices)
                .map(Setting::List)
        };
        let capacities_form = if devices == 1 {
            size_form.to_string()
        } else {
            format!(
                "{size_form}, or a comma-separated list of {devices} such sizes (one per device)"
            )
        };
        let capacities = match read("CUDA_SHIM_DEVICE_MEMORY", &capacities_form, &sizes) {
            Some(Setting::List(list)) if list.len() == devices => list,
            Some(Setting::List(list)) => vec![list[0]; devices],
            _ => vec![DEFAULT_CAPACITY; devices],
        };
        Config {
            devices,
            capacities,
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
            compute_capability: read(
                "CUDA_SHIM_COMPUTE_CAPABILITY",
                "MAJOR.MINOR with a minor digit (e.g. 9.0 or 8.6)",
                &capability,
            )
            .map_or(DEFAULT_COMPUTE_CAPABILITY, |s| s.int() as u32),
            vmm_granularity: read(
                "CUDA_SHIM_VMM_GRANULARITY",
                "a power of two from 4K to 1G (bytes, optional K, M, G suffix)",
                &|s: &str| {
                    parse_bytes(s)
                        .filter(|&b| b.is_power_of_two() && (4096..=1 << 30).contains(&b))
                        .map(Setting::Int)
                },
            )
            .map_or(GRANULARITY, |s| s.int() as usize),
        }
    }
}

enum Setting {
    Int(u64),
    Float(f64),
    List(Vec<u64>),
}

impl Setting {
    fn int(self) -> u64 {
        match self {
            Setting::Int(v) => v,
            Setting::Float(v) => v as u64,
            Setting::List(v) => v.first().copied().unwrap_or(0),
        }
    }
    fn float(self) -> f64 {
        match self {
            Setting::Int(v) => v as f64,
            Setting::Float(v) => v,
            Setting::List(v) => v.first().copied().unwrap_or(0) as f64,
        }
    }
}

/// The CUDA version the driver reports by default (13.5): one driver reports one version to
/// every runtime, as on a real machine, and NVIDIA's CUDA 13 runtime (like the shim's) refuses a
/// driver below 13000, while a CUDA 12 runtime only needs one at least as new as itself.
pub const DEFAULT_DRIVER_VERSION: i32 = 13050;

/// `CUDA_SHIM_DRIVER_VERSION`: the version `cuDriverGetVersion` reports, 1000 × major + 10 ×
/// minor (`13050` for 13.5), from 12000 (what the CUDA 12 runtime needs) to 99999; default
/// [`DEFAULT_DRIVER_VERSION`]. Read on its own, not in [`Config`]: the driver reports its version
/// before `cuInit`. A CUDA 12 driver (e.g. 12090) makes the CUDA 13 runtime fail as NVIDIA's
/// does (docs/cuda13.md).
pub fn driver_version(lookup: impl Fn(&str) -> Option<String>) -> i32 {
    const NAME: &str = "CUDA_SHIM_DRIVER_VERSION";
    let Some(raw) = lookup(NAME) else {
        return DEFAULT_DRIVER_VERSION;
    };
    match raw.trim().parse::<i32>() {
        Ok(version) if (12000..=99999).contains(&version) => version,
        _ => {
            eprintln!(
                "cuda-shim: ignoring {NAME}={raw:?}: expected a CUDA version from 12000 to 99999 \
                 (1000 × major + 10 × minor, e.g. 13050)"
            );
            DEFAULT_DRIVER_VERSION
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
    fn driver_version_is_checked_and_defaults_to_13_5() {
        let version = |raw: Option<&str>| driver_version(|_| raw.map(str::to_string));
        assert_eq!(version(None), 13050);
        assert_eq!(version(Some("12090")), 12090);
        assert_eq!(version(Some(" 12000 ")), 12000);
        assert_eq!(
            version(Some("11080")),
            13050,
            "too old for the CUDA 12 runtime"
        );
        assert_eq!(version(Some("13.5")), 13050);
        assert_eq!(version(Some("")), 13050);
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
        assert_eq!(c.capacities, vec![DEFAULT_CAPACITY]);
        assert_eq!(c.devices, 1);
        assert_eq!(c.jitter, Duration::ZERO);
        assert!(c.h2d_gbps.is_none());
        let c = config(&[
            ("CUDA_SHIM_DEVICE_MEMORY", "lots"),
            ("CUDA_SHIM_H2D_GBPS", "-3"),
        ]);
        assert_eq!(c.capacities, vec![DEFAULT_CAPACITY]);
        assert!(c.h2d_gbps.is_none());
        for bad in ["0", "17", "two", "-1"] {
            assert_eq!(config(&[("CUDA_SHIM_DEVICES", bad)]).devices, 1, "{bad}");
        }
        let c = config(&[
            ("CUDA_SHIM_DEVICES", "3"),
            ("CUDA_SHIM_DEVICE_MEMORY", "1G,2G"),
        ]);
        assert_eq!(
            c.capacities,
            vec![DEFAULT_CAPACITY; 3],
            "a list of the wrong length"
        );
    }

    #[test]
    fn several_devices_take_one_capacity_or_one_each() {
        let c = config(&[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_DEVICE_MEMORY", "64M"),
        ]);
        assert_eq!((c.devices, c.capacities), (2, vec![64 << 20; 2]));
        let c = config(&[
            ("CUDA_SHIM_DEVICES", "3"),
            ("CUDA_SHIM_DEVICE_MEMORY", "1G, 2G,512M"),
        ]);
        assert_eq!(c.capacities, vec![1 << 30, 2 << 30, 512 << 20]);
        let c = config(&[("CUDA_SHIM_DEVICES", "16")]);
        assert_eq!(c.capacities.len(), 16);
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
        assert_eq!(c.capacities, vec![1 << 30]);
        assert_eq!(c.d2h_gbps, Some(12.5));
        assert_eq!(c.jitter, Duration::from_micros(50));
        assert_eq!(c.seed, 7);
        assert_eq!(c.stats_path.as_deref(), Some("/tmp/s.json"));
    }
}
