//! `CUresult` codes and the typed `Result` the driver is written with.
//!
//! Values are those of NVIDIA's `cuda.h` (CUDA 12.9). Inside the crate every fallible operation
//! returns `CuResult<T>`, so `?` works; the exported functions turn it back into the raw `u32`.

use std::fmt;

/// A non-success `CUresult`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuError(pub u32);

/// What every internal driver operation returns.
pub type CuResult<T> = Result<T, CuError>;

pub const CUDA_SUCCESS: u32 = 0;
pub const INVALID_VALUE: CuError = CuError(1);
pub const OUT_OF_MEMORY: CuError = CuError(2);
pub const NOT_INITIALIZED: CuError = CuError(3);
pub const DEINITIALIZED: CuError = CuError(4);
pub const INVALID_DEVICE: CuError = CuError(101);
pub const INVALID_IMAGE: CuError = CuError(200);
pub const NO_BINARY_FOR_GPU: CuError = CuError(209);
pub const INVALID_PTX: CuError = CuError(218);
pub const INVALID_CONTEXT: CuError = CuError(201);
pub const PEER_ACCESS_UNSUPPORTED: CuError = CuError(217);
pub const UNSUPPORTED_EXEC_AFFINITY: CuError = CuError(224);
pub const INVALID_HANDLE: CuError = CuError(400);
pub const ILLEGAL_STATE: CuError = CuError(401);
pub const NOT_FOUND: CuError = CuError(500);
pub const NOT_READY: CuError = CuError(600);
pub const ILLEGAL_ADDRESS: CuError = CuError(700);
pub const PEER_ACCESS_ALREADY_ENABLED: CuError = CuError(704);
pub const PEER_ACCESS_NOT_ENABLED: CuError = CuError(705);
pub const CONTEXT_IS_DESTROYED: CuError = CuError(709);
pub const ASSERT: CuError = CuError(710);
pub const HOST_MEMORY_ALREADY_REGISTERED: CuError = CuError(712);
pub const HOST_MEMORY_NOT_REGISTERED: CuError = CuError(713);
pub const MISALIGNED_ADDRESS: CuError = CuError(716);
pub const LAUNCH_FAILED: CuError = CuError(719);
pub const COOPERATIVE_LAUNCH_TOO_LARGE: CuError = CuError(720);
pub const NOT_SUPPORTED: CuError = CuError(801);
pub const OPERATING_SYSTEM: CuError = CuError(304);
pub const STREAM_CAPTURE_UNSUPPORTED: CuError = CuError(900);
pub const STREAM_CAPTURE_INVALIDATED: CuError = CuError(901);
pub const STREAM_CAPTURE_MERGE: CuError = CuError(902);
pub const STREAM_CAPTURE_UNMATCHED: CuError = CuError(903);
pub const STREAM_CAPTURE_UNJOINED: CuError = CuError(904);
pub const STREAM_CAPTURE_ISOLATION: CuError = CuError(905);
pub const STREAM_CAPTURE_IMPLICIT: CuError = CuError(906);
pub const CAPTURED_EVENT: CuError = CuError(907);
pub const STREAM_CAPTURE_WRONG_THREAD: CuError = CuError(908);
pub const GRAPH_EXEC_UPDATE_FAILURE: CuError = CuError(910);
pub const INVALID_RESOURCE_TYPE: CuError = CuError(914);
pub const INVALID_RESOURCE_CONFIGURATION: CuError = CuError(915);
pub const UNKNOWN: CuError = CuError(999);

/// Errors that leave the context unusable: once a kernel raised one, every later call returns it
/// (CUDA's "sticky" errors).
pub fn is_sticky(code: u32) -> bool {
    matches!(code, 700 | 710 | 714..=719)
}

/// Name and description of a `CUresult`, as `cuGetErrorName`/`cuGetErrorString` report them.
/// NUL-terminated so they can be handed to C as they are.
pub fn describe(code: u32) -> Option<(&'static str, &'static str)> {
    Some(match code {
        0 => ("CUDA_SUCCESS\0", "no error\0"),
        1 => ("CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
        2 => ("CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
        3 => ("CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
        4 => ("CUDA_ERROR_DEINITIALIZED\0", "driver shutting down\0"),
        100 => (
            "CUDA_ERROR_NO_DEVICE\0",
            "no CUDA-capable device is detected\0",
        ),
        101 => ("CUDA_ERROR_INVALID_DEVICE\0", "invalid device ordinal\0"),
        201 => ("CUDA_ERROR_INVALID_CONTEXT\0", "invalid device context\0"),
        200 => (
            "CUDA_ERROR_INVALID_IMAGE\0",
            "device kernel image is invalid\0",
        ),
        209 => (
            "CUDA_ERROR_NO_BINARY_FOR_GPU\0",
            "no kernel image is available for execution on the device\0",
        ),
        218 => ("CUDA_ERROR_INVALID_PTX\0", "a PTX JIT compilation failed\0"),
        217 => (
            "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED\0",
            "peer access is not supported between these two devices\0",
        ),
        224 => (
            "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY\0",
            "the provided execution affinity is not supported\0",
        ),
        400 => ("CUDA_ERROR_INVALID_HANDLE\0", "invalid resource handle\0"),
        401 => (
            "CUDA_ERROR_ILLEGAL_STATE\0",
            "the operation cannot be performed in the present state\0",
        ),
        500 => ("CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
        600 => ("CUDA_ERROR_NOT_READY\0", "device not ready\0"),
        700 => (
            "CUDA_ERROR_ILLEGAL_ADDRESS\0",
            "an illegal memory access was encountered\0",
        ),
        704 => (
            "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0",
            "peer access is already enabled\0",
        ),
        705 => (
            "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED\0",
            "peer access has not been enabled\0",
        ),
        709 => (
            "CUDA_ERROR_CONTEXT_IS_DESTROYED\0",
            "context is destroyed\0",
        ),
        710 => ("CUDA_ERROR_ASSERT\0", "device-side assert triggered\0"),
        712 => (
            "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0",
            "part or all of the requested memory range is already mapped\0",
        ),
        713 => (
            "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0",
            "pointer does not correspond to a registered memory region\0",
        ),
        714 => (
            "CUDA_ERROR_HARDWARE_STACK_ERROR\0",
            "hardware stack error\0",
        ),
        715 => (
            "CUDA_ERROR_ILLEGAL_INSTRUCTION\0",
            "an illegal instruction was encountered\0",
        ),
        716 => ("CUDA_ERROR_MISALIGNED_ADDRESS\0", "misaligned address\0"),
        717 => (
            "CUDA_ERROR_INVALID_ADDRESS_SPACE\0",
            "operation not supported on global/shared address space\0",
        ),
        718 => ("CUDA_ERROR_INVALID_PC\0", "invalid program counter\0"),
        719 => ("CUDA_ERROR_LAUNCH_FAILED\0", "unspecified launch failure\0"),
        720 => (
            "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE\0",
            "too many blocks in cooperative launch\0",
        ),
        304 => (
            "CUDA_ERROR_OPERATING_SYSTEM\0",
            "OS call failed or operation not supported on this OS\0",
        ),
        801 => ("CUDA_ERROR_NOT_SUPPORTED\0", "operation not supported\0"),
        900 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\0",
            "operation not permitted when stream is capturing\0",
        ),
        901 => (
            "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\0",
            "operation failed due to a previous error during capture\0",
        ),
        902 => (
            "CUDA_ERROR_STREAM_CAPTURE_MERGE\0",
            "operation would result in a merge of separate capture sequences\0",
        ),
        903 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED\0",
            "capture was not ended in the same stream as it began\0",
        ),
        904 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNJOINED\0",
            "capturing stream has unjoined work\0",
        ),
        905 => (
            "CUDA_ERROR_STREAM_CAPTURE_ISOLATION\0",
            "dependency created on uncaptured work in another stream\0",
        ),
        906 => (
            "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT\0",
            "operation would make the legacy stream depend on a capturing blocking stream\0",
        ),
        907 => (
            "CUDA_ERROR_CAPTURED_EVENT\0",
            "operation not permitted on an event last recorded in a capturing stream\0",
        ),
        908 => (
            "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD\0",
            "attempt to terminate a thread-local capture sequence from another thread\0",
        ),
        910 => (
            "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE\0",
            "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update\0",
        ),
        914 => (
            "CUDA_ERROR_INVALID_RESOURCE_TYPE\0",
            "invalid resource type\0",
        ),
        915 => (
            "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION\0",
            "invalid resource configuration\0",
        ),
        999 => ("CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
        _ => return None,
    })
}

impl fmt::Display for CuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match describe(self.0) {
            Some((name, _)) => f.write_str(name.trim_end_matches('\0')),
            None => write!(f, "CUresult {}", self.0),
        }
    }
}

/// Converts an internal result into the raw code an exported function returns.
pub fn code(result: CuResult<()>) -> u32 {
    match result {
        Ok(()) => CUDA_SUCCESS,
        Err(CuError(code)) => code,
    }
}
