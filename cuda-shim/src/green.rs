//! Green contexts (CUDA 12.4+): SM resources, their split, descriptors, and the green contexts
//! made from them.
//!
//! NVIDIA's CUDA 13 runtime looks every green-context function up with `cuGetProcAddress`, and
//! PyTorch 2.15 asks the runtime for several (`cudaGetDriverEntryPointByVersion`): where the
//! driver lacks one, the runtime's answer leaves `cudaErrorSymbolNotFound` as the thread's last
//! error, and the caching allocator's next `cudaGetLastError` check fails. So the shim has them,
//! with CUDA's semantics where it can keep them:
//!
//! - a device's SM resource is `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT` SMs, co-scheduled in
//!   groups of 8 from compute capability 9.0 on and of 2 below (what `cuda.h` says of
//!   `coscheduledSmCount`), and splits into groups of whole multiples of that;
//! - a descriptor names a set of SMs of one device and lives as long as the process;
//! - a green context retains its device's primary context until it is destroyed. The shim runs
//!   no kernels on SMs, so a green context partitions nothing: `cuCtxFromGreenCtx` gives the
//!   primary context itself, and a stream made on a green context is a stream of that context.
//!   Such streams outlive the green context and stay usable (NVIDIA's driver detaches them).
//!
//! Invariant: a `CUdevResource` this module wrote carries [`MAGIC`], the device ordinal and the
//! split that made it in its `_internal_padding` (the field NVIDIA keeps for its own state, as
//! `cuda.h` asks callers not to modify it); one without [`MAGIC`] was not made by the driver and
//! is `CUDA_ERROR_INVALID_VALUE`.

use crate::device::{Driver, initialized};
use crate::result::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// `CUdevResourceType`.
pub const RESOURCE_TYPE_INVALID: u32 = 0;
pub const RESOURCE_TYPE_SM: u32 = 1;

/// `CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING` and `_MAX_POTENTIAL_CLUSTER_SIZE`.
const SPLIT_IGNORE_SM_COSCHEDULING: u32 = 0x1;
const SPLIT_FLAGS: u32 = 0x3;

/// `CU_GREEN_CTX_DEFAULT_STREAM`: the only flag of `cuGreenCtxCreate`.
const GREEN_CTX_DEFAULT_STREAM: u32 = 0x1;

/// Marks a resource the driver wrote ("gSMr").
const MAGIC: u32 = 0x7253_4d67;

/// `CUdevSmResource` of CUDA 13 (CUDA 12 declares `smCount` alone, at the same offset).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmResource {
    pub sm_count: u32,
    pub min_partition: u32,
    pub coscheduled_alignment: u32,
    pub flags: u32,
    pub locality_domain: u32,
}

/// `CUdevResource`: 144 bytes in both majors. CUDA 12 has `type`, 92 bytes of padding and a
/// 48-byte union; CUDA 13 splits the union's last 8 bytes off as `nextResource`. The driver
/// writes both layouts alike: `sm` at offset 96 and `next` NULL.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DevResource {
    pub kind: u32,
    magic: u32,
    ordinal: i32,
    /// The `cuDevSmResourceSplitByCount` call that made this resource; 0 for a whole device's.
    split: u64,
    padding: [u8; 72],
    pub sm: SmResource,
    oversize: [u8; 20],
    next: usize,
}

const _: () = assert!(size_of::<DevResource>() == 144);
const _: () = assert!(std::mem::offset_of!(DevResource, sm) == 96);

impl DevResource {
    fn sm(ordinal: i32, split: u64, sm: SmResource) -> DevResource {
        DevResource {
            kind: RESOURCE_TYPE_SM,
            magic: MAGIC,
            ordinal,
            split,
            padding: [0; 72],
            sm,
            oversize: [0; 20],
            next: 0,
        }
    }

    /// The remainder of a split that left no SM: `CU_DEV_RESOURCE_TYPE_INVALID`.
    fn empty(ordinal: i32, split: u64) -> DevResource {
        DevResource {
            kind: RESOURCE_TYPE_INVALID,
            sm: SmResource::default(),
            ..DevResource::sm(ordinal, split, SmResource::default())
        }
    }
}

/// The SM resource of a whole device.
fn device_sm(driver: &Driver, ordinal: i32) -> CuResult<SmResource> {
    driver.device(ordinal)?;
    let sm_count = crate::exports::attribute(16, ordinal)? as u32;
    let alignment = if driver.config.compute_capability >= 90 {
        8
    } else {
        2
    };
    Ok(SmResource {
        sm_count,
        min_partition: alignment,
        coscheduled_alignment: alignment,
        flags: 0,
        locality_domain: 0,
    })
}

/// The resource `type` of something with SM resource `sm` on device `ordinal`: only SM
/// resources exist on the shim (`CUDA_ERROR_INVALID_RESOURCE_TYPE` for the others).
pub fn resource(ordinal: i32, sm: SmResource, kind: u32) -> CuResult<DevResource> {
    if kind != RESOURCE_TYPE_SM {
        return Err(INVALID_RESOURCE_TYPE);
    }
    Ok(DevResource::sm(ordinal, 0, sm))
}

/// `cuDeviceGetDevResource`.
pub fn device_resource(ordinal: i32, kind: u32) -> CuResult<DevResource> {
    let driver = initialized()?;
    resource(ordinal, device_sm(driver, ordinal)?, kind)
}

/// Checks that `input` is an SM resource the driver made.
fn checked(input: &DevResource) -> CuResult<()> {
    if input.kind != RESOURCE_TYPE_SM {
        return Err(INVALID_RESOURCE_TYPE);
    }
    if input.magic != MAGIC {
        return Err(INVALID_VALUE);
    }
    initialized()?.device(input.ordinal).map(drop)
}

/// What `cuDevSmResourceSplitByCount` makes of `input`: `groups` groups of equal size (at most
/// `wanted`, all that fit when `wanted` is `None`) and the remainder.
pub struct Split {
    pub groups: Vec<DevResource>,
    pub remainder: DevResource,
}

/// Splits `input` into groups of at least `min_count` SMs each, rounded up to the co-scheduling
/// alignment (2 with `CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING`); `min_count` 0 asks for
/// the smallest groups.
pub fn split(
    input: &DevResource,
    wanted: Option<u32>,
    flags: u32,
    min_count: u32,
) -> CuResult<Split> {
    if flags & !SPLIT_FLAGS != 0 || wanted == Some(0) {
        return Err(INVALID_VALUE);
    }
    checked(input)?;
    let sm = input.sm;
    if min_count > sm.sm_count {
        return Err(INVALID_VALUE);
    }
    let alignment = if flags & SPLIT_IGNORE_SM_COSCHEDULING != 0 {
        2
    } else {
        sm.coscheduled_alignment.max(1)
    };
    let size = min_count.max(alignment).div_ceil(alignment) * alignment;
    let fit = sm.sm_count / size;
    let count = wanted.map_or(fit, |w| w.min(fit));
    static SPLITS: AtomicU64 = AtomicU64::new(1);
    // Relaxed: a counter, only unique values matter.
    let id = SPLITS.fetch_add(1, Ordering::Relaxed);
    let group = SmResource {
        sm_count: size,
        min_partition: alignment,
        coscheduled_alignment: alignment,
        ..sm
    };
    let left = sm.sm_count - count * size;
    let remainder = if left == 0 {
        DevResource::empty(input.ordinal, id)
    } else {
        DevResource::sm(
            input.ordinal,
            id,
            SmResource {
                sm_count: left,
                ..group
            },
        )
    };
    Ok(Split {
        groups: vec![DevResource::sm(input.ordinal, id, group); count as usize],
        remainder,
    })
}

/// A descriptor: the SMs of one device that a green context gets.
#[derive(Clone, Copy)]
struct Descriptor {
    ordinal: i32,
    sm: SmResource,
}

/// Descriptors live as long as the process (`cuda.h`); a handle is `DESCRIPTOR_BASE` plus the
/// index here, so a handle of another kind (or a green context) is never taken for one.
static DESCRIPTORS: Mutex<Vec<Descriptor>> = Mutex::new(Vec::new());
const DESCRIPTOR_BASE: usize = 0xd5c0_0000;

/// `cuDevResourceGenerateDesc`: SM resources of one device, and of one split when there are
/// several (`CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION` otherwise).
pub fn generate_descriptor(resources: &[DevResource]) -> CuResult<usize> {
    let first = resources.first().ok_or(INVALID_VALUE)?;
    for resource in resources {
        checked(resource)?;
        if resource.ordinal != first.ordinal
            || (resources.len() > 1
                && (resource.split == 0
                    || resource.split != first.split
                    || resource.sm.coscheduled_alignment != first.sm.coscheduled_alignment))
        {
            return Err(INVALID_RESOURCE_CONFIGURATION);
        }
    }
    let sm = SmResource {
        sm_count: resources.iter().map(|r| r.sm.sm_count).sum(),
        ..first.sm
    };
    let mut descriptors = DESCRIPTORS.lock();
    descriptors.push(Descriptor {
        ordinal: first.ordinal,
        sm,
    });
    Ok(DESCRIPTOR_BASE + descriptors.len() - 1)
}

fn descriptor(handle: usize) -> CuResult<Descriptor> {
    handle
        .checked_sub(DESCRIPTOR_BASE)
        .and_then(|i| DESCRIPTORS.lock().get(i).copied())
        .ok_or(INVALID_VALUE)
}

/// A live green context.
#[derive(Clone, Copy)]
pub struct Green {
    pub ordinal: i32,
    pub sm: SmResource,
    pub id: u64,
}

/// Live green contexts by handle: `GREEN_BASE` plus a number never reused, so a destroyed
/// handle stays `CUDA_ERROR_INVALID_CONTEXT`.
static GREENS: Mutex<Option<HashMap<usize, Green>>> = Mutex::new(None);
const GREEN_BASE: usize = 0x96c0_0000;

/// `cuGreenCtxCreate`: retains the device's primary context (released by [`destroy`]).
pub fn create(descriptor_handle: usize, ordinal: i32, flags: u32) -> CuResult<usize> {
    let driver = initialized()?;
    driver.device(ordinal)?;
    if flags & !GREEN_CTX_DEFAULT_STREAM != 0 {
        return Err(INVALID_VALUE);
    }
    let found = descriptor(descriptor_handle)?;
    if found.ordinal != ordinal {
        return Err(INVALID_DEVICE);
    }
    static IDS: AtomicU64 = AtomicU64::new(1);
    // Relaxed: a counter, only unique values matter.
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let handle = GREEN_BASE + id as usize;
    driver.retain_primary(ordinal as usize);
    GREENS.lock().get_or_insert_default().insert(
        handle,
        Green {
            ordinal,
            sm: found.sm,
            id,
        },
    );
    Ok(handle)
}

/// The live green context `handle` (`CUDA_ERROR_INVALID_CONTEXT` for NULL, an unknown or a
/// destroyed one).
pub fn green(handle: usize) -> CuResult<Green> {
    initialized()?;
    GREENS
        .lock()
        .as_ref()
        .and_then(|greens| greens.get(&handle).copied())
        .ok_or(INVALID_CONTEXT)
}

/// `cuGreenCtxDestroy`: releases the primary context retained by [`create`].
pub fn destroy(handle: usize) -> CuResult<()> {
    let driver = initialized()?;
    let removed = GREENS
        .lock()
        .as_mut()
        .and_then(|greens| greens.remove(&handle))
        .ok_or(INVALID_CONTEXT)?;
    driver.release_primary(removed.ordinal as usize)
}

/// The `CUcontext` of green context `handle`: its device's primary context.
pub fn context(handle: usize) -> CuResult<usize> {
    let found = green(handle)?;
    Ok(initialized()?.context(found.ordinal)?.handle())
}
