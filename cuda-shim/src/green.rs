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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::*;
    use std::ffi::c_void;
    use std::ptr::{null, null_mut};

    /// A zeroed `CUdevResource`, as a caller declares one.
    fn blank() -> DevResource {
        DevResource::empty(0, 0)
    }

    /// Device 0's SM resource, as `cuDeviceGetDevResource` gives it.
    fn device_zero() -> DevResource {
        // SAFETY (every `unsafe` below): arguments as CUDA's prototypes ask, out-parameters
        // pointing to locals of their type.
        assert_eq!(unsafe { cuInit(0) }, 0);
        let mut resource = blank();
        assert_eq!(
            unsafe { cuDeviceGetDevResource(0, &mut resource, RESOURCE_TYPE_SM) },
            0
        );
        resource
    }

    #[test]
    fn a_device_resource_has_the_device_sm_count_and_splits_in_aligned_groups() {
        // SAFETY (every `unsafe` in this test): arguments as CUDA's prototypes ask, NULL where
        // the test means it, out-parameters and arrays pointing to locals of their type and
        // length; host buffers outlive the synchronous copies that use them.
        let device = device_zero();
        let sms = attribute(16, 0).unwrap() as u32;
        let alignment = if initialized().unwrap().config.compute_capability >= 90 {
            8
        } else {
            2
        };
        assert_eq!(device.kind, RESOURCE_TYPE_SM);
        assert_eq!(device.sm.sm_count, sms);
        assert_eq!(device.sm.coscheduled_alignment, alignment);
        let mut out = blank();
        assert_eq!(
            unsafe { cuDeviceGetDevResource(0, null_mut(), RESOURCE_TYPE_SM) },
            1
        );
        assert_eq!(unsafe { cuDeviceGetDevResource(0, &mut out, 1000) }, 914);
        assert_eq!(
            unsafe { cuDeviceGetDevResource(99, &mut out, RESOURCE_TYPE_SM) },
            101
        );

        // Query: how many groups of the smallest size fit.
        let mut count = 0u32;
        let query = unsafe {
            cuDevSmResourceSplitByCount(null_mut(), &mut count, &device, null_mut(), 0, 0)
        };
        assert_eq!((query, count), (0, sms / alignment));

        // Two groups of at least alignment + 1 SMs: rounded up to 2 x alignment each.
        let mut groups = [blank(); 2];
        let mut remainder = blank();
        let mut count = 2u32;
        let split = unsafe {
            cuDevSmResourceSplitByCount(
                groups.as_mut_ptr(),
                &mut count,
                &device,
                &mut remainder,
                0,
                alignment + 1,
            )
        };
        assert_eq!((split, count), (0, 2));
        for group in groups {
            assert_eq!(
                (group.kind, group.sm.sm_count),
                (RESOURCE_TYPE_SM, 2 * alignment)
            );
        }
        assert_eq!(remainder.kind, RESOURCE_TYPE_SM);
        assert_eq!(remainder.sm.sm_count, sms - 4 * alignment);

        let split = |input: &DevResource, flags, min| {
            let mut count = 1u32;
            let mut group = blank();
            unsafe {
                cuDevSmResourceSplitByCount(&mut group, &mut count, input, null_mut(), flags, min)
            }
        };
        assert_eq!(split(&device, 0, sms + 1), 1, "more SMs than the input has");
        assert_eq!(split(&device, 4, 0), 1, "unknown flag");
        assert_eq!(split(&blank(), 0, 0), 914, "not an SM resource");
        let mut forged = device;
        forged.magic = 0;
        assert_eq!(split(&forged, 0, 0), 1, "not made by the driver");
        assert_eq!(
            unsafe {
                cuDevSmResourceSplitByCount(null_mut(), null_mut(), &device, null_mut(), 0, 0)
            },
            1
        );
    }

    #[test]
    fn a_green_context_runs_streams_on_its_device_until_destroyed() {
        // SAFETY (every `unsafe` in this test): arguments as CUDA's prototypes ask, NULL where
        // the test means it, out-parameters and arrays pointing to locals of their type and
        // length; host buffers outlive the synchronous copies that use them.
        let device = device_zero();
        let mut groups = [blank(); 2];
        let mut count = 2u32;
        let alignment = device.sm.coscheduled_alignment;
        assert_eq!(
            unsafe {
                cuDevSmResourceSplitByCount(
                    groups.as_mut_ptr(),
                    &mut count,
                    &device,
                    null_mut(),
                    0,
                    0,
                )
            },
            0
        );
        let mut descriptor = 0usize;
        // Resources of different splits (or a whole device's with a group) make no descriptor.
        let mixed = [device, groups[0]];
        assert_eq!(
            unsafe { cuDevResourceGenerateDesc(&mut descriptor, mixed.as_ptr(), 2) },
            915
        );
        assert_eq!(
            unsafe { cuDevResourceGenerateDesc(&mut descriptor, groups.as_ptr(), 0) },
            1
        );
        assert_eq!(
            unsafe { cuDevResourceGenerateDesc(&mut descriptor, groups.as_ptr(), 2) },
            0
        );

        let mut green = 0usize;
        assert_eq!(
            unsafe { cuGreenCtxCreate(&mut green, descriptor + 1000, 0, 0) },
            1
        );
        assert_eq!(unsafe { cuGreenCtxCreate(&mut green, descriptor, 0, 2) }, 1);
        assert_eq!(unsafe { cuGreenCtxCreate(null_mut(), descriptor, 0, 0) }, 1);
        assert_eq!(unsafe { cuGreenCtxCreate(&mut green, descriptor, 0, 1) }, 0);

        // The green context holds the SMs of both groups and keeps the primary context active.
        let mut resource = blank();
        assert_eq!(
            unsafe { cuGreenCtxGetDevResource(green, &mut resource, RESOURCE_TYPE_SM) },
            0
        );
        assert_eq!(resource.sm.sm_count, 2 * alignment);
        let (mut flags, mut active) = (0u32, 0i32);
        assert_eq!(
            unsafe { cuDevicePrimaryCtxGetState(0, &mut flags, &mut active) },
            0
        );
        assert_eq!(active, 1);
        let (mut first, mut second) = (0u64, 0u64);
        assert_eq!(unsafe { cuGreenCtxGetId(green, &mut first) }, 0);
        let mut other = 0usize;
        assert_eq!(unsafe { cuGreenCtxCreate(&mut other, descriptor, 0, 0) }, 0);
        assert_eq!(unsafe { cuGreenCtxGetId(other, &mut second) }, 0);
        assert_ne!(first, second);
        assert_eq!(unsafe { cuGreenCtxDestroy(other) }, 0);

        // Its CUcontext is a usable context: memory and a stream of the green context.
        let mut context = 0usize;
        assert_eq!(unsafe { cuCtxFromGreenCtx(null_mut(), green) }, 1);
        assert_eq!(unsafe { cuCtxFromGreenCtx(&mut context, green) }, 0);
        assert_eq!(context, initialized().unwrap().context(0).unwrap().handle());
        assert_eq!(unsafe { cuCtxSetCurrent(context) }, 0);
        let mut stream = 0usize;
        assert_eq!(
            unsafe { cuGreenCtxStreamCreate(&mut stream, green, 0, 0) },
            1
        );
        assert_eq!(
            unsafe { cuGreenCtxStreamCreate(null_mut(), green, 1, 0) },
            1
        );
        assert_eq!(
            unsafe { cuGreenCtxStreamCreate(&mut stream, green, 1, -100) },
            0
        );
        let mut priority = 0;
        assert_eq!(unsafe { cuStreamGetPriority(stream, &mut priority) }, 0);
        assert_eq!(priority, GREATEST_PRIORITY);
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut back = vec![0u8; bytes.len()];
        let mut memory = 0u64;
        unsafe {
            assert_eq!(cuMemAlloc_v2(&mut memory, bytes.len()), 0);
            let src = bytes.as_ptr() as *const c_void;
            assert_eq!(cuMemcpyHtoDAsync_v2(memory, src, bytes.len(), stream), 0);
            assert_eq!(cuStreamSynchronize(stream), 0);
            assert_eq!(
                cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), memory, back.len()),
                0
            );
            assert_eq!(cuMemFree_v2(memory), 0);
            assert_eq!(cuStreamDestroy_v2(stream), 0);
        }
        assert_eq!(back, bytes);

        assert_eq!(unsafe { cuGreenCtxDestroy(green) }, 0);
        // A destroyed green context is an invalid one, for every call.
        assert_eq!(unsafe { cuGreenCtxDestroy(green) }, 201);
        assert_eq!(unsafe { cuCtxFromGreenCtx(&mut context, green) }, 201);
        assert_eq!(unsafe { cuGreenCtxGetId(green, &mut first) }, 201);
        assert_eq!(
            unsafe { cuGreenCtxStreamCreate(&mut stream, green, 1, 0) },
            201
        );
        assert_eq!(unsafe { cuGreenCtxDestroy(0) }, 201);
    }

    #[test]
    fn multicast_is_not_supported_and_every_green_function_is_found() {
        // SAFETY (every `unsafe` in this test): arguments as CUDA's prototypes ask, NULL where
        // the test means it, out-parameters and arrays pointing to locals of their type and
        // length; host buffers outlive the synchronous copies that use them.
        device_zero();
        let prop = [0u64; 4];
        let mut handle = 0u64;
        assert_eq!(
            unsafe { cuMulticastCreate(&mut handle, prop.as_ptr().cast()) },
            801
        );
        assert_eq!(
            unsafe { cuMulticastCreate(null_mut(), prop.as_ptr().cast()) },
            1
        );
        assert_eq!(unsafe { cuMulticastCreate(&mut handle, null()) }, 1);
        assert_eq!(unsafe { cuMulticastAddDevice(handle, 0) }, 801);
        assert_eq!(unsafe { cuMulticastUnbind(handle, 0, 0, 0) }, 801);
        // The lookups PyTorch 2.15 makes through NVIDIA's runtime (cudaGetDriverEntryPointByVersion).
        for (name, version) in [
            ("cuMulticastCreate", 12030),
            ("cuMulticastAddDevice", 12030),
            ("cuMulticastBindMem", 12030),
            ("cuMulticastUnbind", 12030),
            ("cuCtxFromGreenCtx", 12080),
            ("cuGreenCtxCreate", 12080),
            ("cuGreenCtxDestroy", 12080),
            ("cuGreenCtxStreamCreate", 12080),
            ("cuDevSmResourceSplitByCount", 12080),
            ("cuDeviceGetDevResource", 12080),
            ("cuDevResourceGenerateDesc", 12080),
        ] {
            assert!(lookup(name, version, false).is_ok(), "{name} at {version}");
        }
    }
}
