//! The roofline cost model: how long an op takes on a named device when the trace does not say.
//!
//! `time = max(flops / peak_flops, bytes / memory_bandwidth) + launch_latency`
//!
//! An op is either compute-bound (a convolution, a matmul) or memory-bound (every elementwise
//! op, a normalisation, an optimizer update); the roofline takes whichever limit binds, and the
//! launch latency is the floor every kernel pays (launch, scheduling, the tail of the grid).
//! It is what the AutoSwap simulator needs from a trace without kernel times (the generated
//! dispatch traces, itermem's own traces): a duration per op that is right in *proportion* —
//! which gaps between two uses of a tensor are long enough to hide a copy — more than in
//! absolute value.
//!
//! # Why these rates
//!
//! The presets use the vendors' peak figures, not measured throughput: a model of peaks is
//! reproducible and easy to state, and its error is measured instead of hidden in a fudge
//! factor (`ops::calibrate`, and the tests print the figures). Measured on the real traces
//! (`ops::tests`): the V100 ResNet-50 b32 profiler trace runs a step's kernels in 98.5 ms
//! (median of 6 steps) where this model gives 74.9 ms for the generated ResNet-50 b32 step
//! (0.76×: cuDNN and cuBLAS reach roughly three quarters of the roofline). On the DTR logs,
//! which carry no FLOPs, the model is memory-bound only and gives 0.32–0.59× the measured
//! time per op (median ratio), log-correlation 0.63–0.89. A user who wants absolute times
//! scales the rates ([`CostModel::new`] takes any rates).
//!
//! - **V100** (SXM2): 15.7 TFLOP/s fp32 on CUDA cores, 900 GB/s HBM2, 5 µs per kernel.
//! - **Titan V** (the GPU of the DTR logs): 13.8 TFLOP/s fp32 (base clock rate; boost gives
//!   14.9), 652.8 GB/s, 5 µs.
//! - **H100** (SXM5): 67 TFLOP/s fp32 on CUDA cores, 3.35 TB/s HBM3, 4 µs. The fp32 CUDA-core
//!   rate, not the 495 TFLOP/s of dense TF32 tensor cores: PyTorch runs fp32 matmuls in full
//!   fp32 by default (`torch.backends.cuda.matmul.allow_tf32 = False` since 1.12), and the
//!   traces record fp32 training. Convolutions may use TF32 (cuDNN's default allows it), so
//!   this preset overestimates convolution time; [`CostModel::new`] with 495e12 models TF32.
//! - Host link (PCIe 3 x16 pinned, ≈ 12 GB/s; PCIe 5 x16 ≈ 50 GB/s for the H100): only for the
//!   host↔device copies an itermem trace records; the swap simulator has its own copy model.
//!
//! FLOPs count multiply and add separately (what `torch.utils.flop_counter` reports).

use std::fmt;

/// Device rates for [`CostModel::op_time_ns`]. Built by a preset or by [`CostModel::new`],
/// which checks every rate: all are finite, rates positive, the latency non-negative.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    name: String,
    peak_flops: f64,
    memory_bandwidth: f64,
    launch_latency_ns: f64,
    host_link_bandwidth: f64,
}

/// A rate given to [`CostModel::new`] that is not usable.
#[derive(Clone, Debug, PartialEq)]
pub struct CostError {
    pub field: &'static str,
    pub value: f64,
    pub expected: &'static str,
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cost model: {} = {} is not usable; expected {}",
            self.field, self.value, self.expected
        )
    }
}

impl std::error::Error for CostError {}

impl Default for CostModel {
    /// The V100 preset.
    fn default() -> Self {
        CostModel::v100()
    }
}

impl CostModel {
    /// Names accepted by [`CostModel::preset`].
    pub const PRESETS: [&'static str; 3] = ["v100", "titan-v", "h100"];

    /// A device with the given rates: `peak_flops` in FLOP/s, bandwidths in bytes/s, the launch
    /// latency in ns.
    pub fn new(
        name: impl Into<String>,
        peak_flops: f64,
        memory_bandwidth: f64,
        launch_latency_ns: f64,
        host_link_bandwidth: f64,
    ) -> Result<CostModel, CostError> {
        let positive = |field, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(CostError {
                    field,
                    value,
                    expected: "a finite rate > 0",
                })
            }
        };
        positive("peak_flops", peak_flops)?;
        positive("memory_bandwidth", memory_bandwidth)?;
        positive("host_link_bandwidth", host_link_bandwidth)?;
        if !(launch_latency_ns.is_finite() && launch_latency_ns >= 0.0) {
            return Err(CostError {
                field: "launch_latency_ns",
                value: launch_latency_ns,
                expected: "a finite time ≥ 0 ns",
            });
        }
        Ok(CostModel {
            name: name.into(),
            peak_flops,
            memory_bandwidth,
            launch_latency_ns,
            host_link_bandwidth,
        })
    }

    /// NVIDIA V100 SXM2: 15.7 TFLOP/s fp32, 900 GB/s, 5 µs, PCIe 3 x16 (12 GB/s).
    pub fn v100() -> CostModel {
        CostModel {
            name: "v100".into(),
            peak_flops: 15.7e12,
            memory_bandwidth: 900e9,
            launch_latency_ns: 5_000.0,
            host_link_bandwidth: 12e9,
        }
    }

    /// NVIDIA Titan V (the DTR logs' GPU): 13.8 TFLOP/s fp32, 652.8 GB/s, 5 µs, PCIe 3 x16.
    pub fn titan_v() -> CostModel {
        CostModel {
            name: "titan-v".into(),
            peak_flops: 13.8e12,
            memory_bandwidth: 652.8e9,
            launch_latency_ns: 5_000.0,
            host_link_bandwidth: 12e9,
        }
    }

    /// NVIDIA H100 SXM5: 67 TFLOP/s fp32 (CUDA cores, see the module doc), 3.35 TB/s, 4 µs,
    /// PCIe 5 x16 (50 GB/s).
    pub fn h100() -> CostModel {
        CostModel {
            name: "h100".into(),
            peak_flops: 67e12,
            memory_bandwidth: 3.35e12,
            launch_latency_ns: 4_000.0,
            host_link_bandwidth: 50e9,
        }
    }

    /// A preset by name (case-insensitive; see [`CostModel::PRESETS`]).
    pub fn preset(name: &str) -> Option<CostModel> {
        match name.to_ascii_lowercase().as_str() {
            "v100" => Some(CostModel::v100()),
            "titan-v" | "titanv" | "titan_v" => Some(CostModel::titan_v()),
            "h100" => Some(CostModel::h100()),
            _ => None,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// FLOP/s.
    pub fn peak_flops(&self) -> f64 {
        self.peak_flops
    }

    /// Device memory bandwidth, bytes/s.
    pub fn memory_bandwidth(&self) -> f64 {
        self.memory_bandwidth
    }

    pub fn launch_latency_ns(&self) -> f64 {
        self.launch_latency_ns
    }

    /// Host↔device bandwidth, bytes/s.
    pub fn host_link_bandwidth(&self) -> f64 {
        self.host_link_bandwidth
    }

    /// Duration of one kernel doing `flops` FLOPs and moving `bytes` bytes of device memory:
    /// `max(flops / peak, bytes / bandwidth) + latency`, in ns. Negative or non-finite FLOPs
    /// count as 0.
    pub fn op_time_ns(&self, flops: f64, bytes: u64) -> f64 {
        let flops = if flops.is_finite() && flops > 0.0 {
            flops
        } else {
            0.0
        };
        let compute = flops / self.peak_flops * 1e9;
        let memory = bytes as f64 / self.memory_bandwidth * 1e9;
        compute.max(memory) + self.launch_latency_ns
    }

    /// Duration of a host↔device copy of `bytes`: latency + bytes / host link bandwidth, in ns.
    pub fn host_copy_time_ns(&self, bytes: u64) -> f64 {
        bytes as f64 / self.host_link_bandwidth * 1e9 + self.launch_latency_ns
    }
}
