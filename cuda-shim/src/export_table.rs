//! `cuGetExportTable`: the private tables NVIDIA's runtime asks its driver for.
//!
//! NVIDIA's runtime (`libcudart_static.a` linked into every default `nvcc` build, and
//! `libcudart.so.13`) reaches its driver through `cuGetProcAddress` and through a few tables of
//! functions that no header declares, each named by a UUID. What they hold is known from ZLUDA's
//! work (github.com/vosen/ZLUDA, `dark_api/`) and was confirmed here by running NVIDIA's CUDA
//! 13.0 runtime on this driver with `CUDA_SHIM_LOG_EXPORT_TABLES=1`. A table is an array of
//! pointer-sized words; most start with their own size in bytes, one (context-local storage)
//! does not. Every entry the shim does not implement is a function that says, once, on stderr
//! which entry of which table was called and returns `CUDA_ERROR_NOT_SUPPORTED`: a table entry
//! we lack is a clear failure, never a jump to NULL. An unknown UUID is
//! `CUDA_ERROR_INVALID_VALUE` (ZLUDA's answer): the 13.0 runtime first asks for
//! `{F8CFF951-2146-8B4E-B9E2-FB469E7C0DD9}`, which nobody has described, and does without it.

use crate::device::{self, StorageDestructor};
use crate::exports::{device_uuid, driver_version, guard};
use crate::result::*;
use std::ffi::c_void;
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// `CUDA_SHIM_LOG_EXPORT_TABLES=1`: log every `cuGetExportTable` request and every name
/// `cuGetProcAddress` does not resolve, on stderr. Read once.
pub fn logging() -> bool {
    static LOGGING: OnceLock<bool> = OnceLock::new();
    *LOGGING.get_or_init(|| {
        std::env::var("CUDA_SHIM_LOG_EXPORT_TABLES").is_ok_and(|v| !v.is_empty() && v != "0")
    })
}

/// One `cuda-shim:` line on stderr.
pub fn log(message: std::fmt::Arguments) {
    // Not eprintln!: it panics when stderr fails.
    let _ = writeln!(std::io::stderr(), "cuda-shim: {message}");
}

/// One word of a table: a function, or the table's size.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Word(*const c_void);

// SAFETY: the words are addresses of functions and sizes, immutable after compilation.
unsafe impl Sync for Word {}

impl Word {
    /// The first word of most tables: their size in bytes.
    const fn size_of(words: usize) -> Word {
        Word(std::ptr::without_provenance(words * size_of::<Word>()))
    }

    /// Entry `INDEX` of table `TABLE` (an index of [`TABLES`]), which the shim does not serve.
    const fn unserved<const TABLE: usize, const INDEX: usize>() -> Word {
        Word(unserved::<TABLE, INDEX> as *const c_void)
    }
}

/// A table of [`TABLES`]: its name (ZLUDA's), UUID and words.
struct Table {
    name: &'static str,
    id: [u8; 16],
    words: &'static [Word],
}

/// The UUID of a table as NVIDIA's tools print it: its 16 bytes in order, grouped 4-2-2-2-6.
fn uuid_text(id: &[u8; 16]) -> String {
    let hex: Vec<String> = id.iter().map(|b| format!("{b:02X}")).collect();
    format!(
        "{{{}-{}-{}-{}-{}}}",
        hex[..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..].concat()
    )
}

/// Every table the shim serves. Indices are the `TABLE` of [`Word::unserved`].
static TABLES: [Table; 7] = [
    Table {
        name: "CUDART_INTERFACE",
        id: [
            0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd,
            0x9d, 0xf9,
        ],
        words: &CUDART_INTERFACE,
    },
    Table {
        name: "TOOLS_RUNTIME_CALLBACK_HOOKS",
        id: [
            0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c,
            0x0a, 0x66,
        ],
        words: &TOOLS_RUNTIME_CALLBACK_HOOKS,
    },
    Table {
        name: "TOOLS_TLS",
        id: [
            0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a,
            0xec, 0xdc,
        ],
        words: &TOOLS_TLS,
    },
    Table {
        name: "CONTEXT_LOCAL_STORAGE_INTERFACE_V0301",
        id: [
            0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8,
            0x95, 0x93,
        ],
        words: &CONTEXT_LOCAL_STORAGE,
    },
    Table {
        name: "CONTEXT_CHECKS",
        id: [
            0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d,
            0xfa, 0x7e,
        ],
        words: &CONTEXT_CHECKS,
    },
    Table {
        name: "INTEGRITY_CHECK",
        id: [
            0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66,
            0xe1, 0xf2,
        ],
        words: &INTEGRITY_CHECK,
    },
    Table {
        name: "UNNAMED_13_5",
        id: [
            0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24,
            0xc8, 0xf2,
        ],
        words: &UNNAMED_13_5,
    },
];

/// The runtime's interface to its driver. ZLUDA found module loaders at 1, 6 and 8 (from a
/// registered fatbinary) and a no-op at 7; neither CUDA 13.0's nor 13.5's runtime calls them (they
/// load their kernels with `cuLibraryLoadData`, in lazy and eager loading alike). 13.5's calls 12
/// when it initialises.
static CUDART_INTERFACE: [Word; 13] = [
    Word::size_of(13),
    Word::unserved::<0, 1>(),
    Word(primary_context as *const c_void),
    Word::unserved::<0, 3>(),
    Word::unserved::<0, 4>(),
    Word::unserved::<0, 5>(),
    Word::unserved::<0, 6>(),
    Word::unserved::<0, 7>(),
    Word::unserved::<0, 8>(),
    Word::unserved::<0, 9>(),
    Word::unserved::<0, 10>(),
    Word::unserved::<0, 11>(),
    Word(load_compilers as *const c_void),
];

/// Where a profiler's callbacks would be subscribed: two buffers, left zero (no subscriber).
static TOOLS_RUNTIME_CALLBACK_HOOKS: [Word; 7] = [
    Word::size_of(7),
    Word::unserved::<1, 1>(),
    Word(callback_buffer as *const c_void),
    Word::unserved::<1, 3>(),
    Word::unserved::<1, 4>(),
    Word::unserved::<1, 5>(),
    Word(callback_buffer_small as *const c_void),
];

/// Asked for by the runtime, never called on the shim (no tool is attached).
static TOOLS_TLS: [Word; 4] = [
    Word::size_of(4),
    Word::unserved::<2, 1>(),
    Word::unserved::<2, 2>(),
    Word::unserved::<2, 3>(),
];

/// The runtime's per-context state. This table has no size word.
static CONTEXT_LOCAL_STORAGE: [Word; 4] = [
    Word(storage_put as *const c_void),
    Word(storage_delete as *const c_void),
    Word(storage_get as *const c_void),
    Word::unserved::<3, 3>(),
];

static CONTEXT_CHECKS: [Word; 4] = [
    Word::size_of(4),
    Word::unserved::<4, 1>(),
    Word(context_check as *const c_void),
    Word(no_context_flags as *const c_void),
];

static INTEGRITY_CHECK: [Word; 3] = [
    Word::size_of(3),
    Word(integrity_check as *const c_void),
    Word::unserved::<5, 2>(),
];

/// A table CUDA 13.5's runtime asks for (13.0's does not), which nobody has described: without
/// it the runtime's initialisation fails with `cudaErrorInvalidValue`, and no program here calls
/// any of its entries. Its length is unknown; 16 unserved entries make a call a logged failure
/// rather than a read past the table.
static UNNAMED_13_5: [Word; 16] = [
    Word::size_of(16),
    Word::unserved::<6, 1>(),
    Word::unserved::<6, 2>(),
    Word::unserved::<6, 3>(),
    Word::unserved::<6, 4>(),
    Word::unserved::<6, 5>(),
    Word::unserved::<6, 6>(),
    Word::unserved::<6, 7>(),
    Word::unserved::<6, 8>(),
    Word::unserved::<6, 9>(),
    Word::unserved::<6, 10>(),
    Word::unserved::<6, 11>(),
    Word::unserved::<6, 12>(),
    Word::unserved::<6, 13>(),
    Word::unserved::<6, 14>(),
    Word::unserved::<6, 15>(),
];

/// `cuGetExportTable`: the table whose UUID `id` points to.
///
/// # Safety
/// `table` is null or valid for a pointer write; `id` is null or points to 16 bytes.
pub unsafe fn get(table: *mut *const c_void, id: *const [u8; 16]) -> CuResult<()> {
    if table.is_null() || id.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null, 16 readable bytes by the caller's contract.
    let id = unsafe { id.read() };
    let Some(found) = TABLES.iter().find(|t| t.id == id) else {
        if logging() {
            log(format_args!(
                "cuGetExportTable({}): not a table the shim has; CUDA_ERROR_INVALID_VALUE",
                uuid_text(&id)
            ));
        }
        return Err(INVALID_VALUE);
    };
    if logging() {
        log(format_args!(
            "cuGetExportTable({}): {}",
            uuid_text(&id),
            found.name
        ));
    }
    // SAFETY: checked non-null; the caller's out-parameter.
    unsafe { table.write(found.words.as_ptr().cast()) };
    Ok(())
}

/// An entry the shim does not serve: one line naming it (the first time), then
/// `CUDA_ERROR_NOT_SUPPORTED`. Its arguments are unknown and not read (C callers may pass any).
unsafe extern "C" fn unserved<const TABLE: usize, const INDEX: usize>() -> u32 {
    if first_call(TABLE, INDEX) {
        let table = &TABLES[TABLE];
        log(format_args!(
            "the runtime called entry {INDEX} of export table {} {}, which the shim does not \
             implement; returning CUDA_ERROR_NOT_SUPPORTED",
            table.name,
            uuid_text(&table.id)
        ));
    }
    NOT_SUPPORTED.0
}

/// Most words a table of [`TABLES`] has.
const MAX_WORDS: usize = 16;

/// Whether entry `index` of table `table` is called for the first time. (A `static` inside the
/// generic [`unserved`] would be one for all its instances, not one per entry.)
fn first_call(table: usize, index: usize) -> bool {
    static CALLED: [AtomicBool; TABLES.len() * MAX_WORDS] =
        [const { AtomicBool::new(false) }; TABLES.len() * MAX_WORDS];
    !CALLED[table * MAX_WORDS + index].swap(true, Ordering::Relaxed)
}

// ---- CUDART_INTERFACE ----

/// The primary context of `device`, neither retained nor made current (the runtime retains it
/// itself, with `cuDevicePrimaryCtxRetain`, when it first uses it).
///
/// # Safety
/// `context` is null or valid for a write.
unsafe extern "C" fn primary_context(context: *mut usize, device: i32) -> u32 {
    guard("CUDART_INTERFACE[2]", || {
        let handle = device::driver()?.context(device)?.handle();
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { context.write(handle) };
        Ok(())
    })
}

/// Entry 12: on NVIDIA's driver, loads its PTX compiler and libNVVM (ZLUDA's finding). The shim
/// interprets PTX and needs neither: success.
extern "C" fn load_compilers() -> u32 {
    CUDA_SUCCESS
}

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS ----

/// A zeroed buffer the runtime may read and write.
struct Buffer<const N: usize>(std::cell::UnsafeCell<[u64; N]>);

// SAFETY: the shim never touches the buffers; the runtime owns what it stores there.
unsafe impl<const N: usize> Sync for Buffer<N> {}

// Their sizes are ZLUDA's; each holds 8-byte words, so a runtime that counts them in 4-byte
// words or in bytes stays inside.
static CALLBACKS: Buffer<1024> = Buffer(std::cell::UnsafeCell::new([0; 1024]));
static CALLBACKS_SMALL: Buffer<14> = Buffer(std::cell::UnsafeCell::new([0; 14]));

/// The buffer where a profiler's runtime callbacks would be enabled (all zero: none).
///
/// # Safety
/// Both pointers are null (ignored) or valid for a write.
unsafe extern "C" fn callback_buffer(buffer: *mut *mut c_void, size: *mut usize) {
    // SAFETY: forwarded contract.
    unsafe { give_buffer(&CALLBACKS, buffer, size) }
}

/// The second, smaller buffer of the same kind.
///
/// # Safety
/// As for [`callback_buffer`].
unsafe extern "C" fn callback_buffer_small(buffer: *mut *mut c_void, size: *mut usize) {
    // SAFETY: forwarded contract.
    unsafe { give_buffer(&CALLBACKS_SMALL, buffer, size) }
}

/// # Safety
/// As for [`callback_buffer`].
unsafe fn give_buffer<const N: usize>(
    from: &'static Buffer<N>,
    buffer: *mut *mut c_void,
    size: *mut usize,
) {
    if !buffer.is_null() && !size.is_null() {
        // SAFETY: both checked non-null; the caller's out-parameters.
        unsafe {
            buffer.write(from.0.get().cast());
            size.write(N);
        }
    }
}

// ---- CONTEXT_LOCAL_STORAGE_INTERFACE_V0301 ----

/// The context a storage call names: `context`, or the current one when it is NULL.
fn storage_context(context: usize) -> CuResult<usize> {
    if context != 0 {
        return Ok(context);
    }
    match device::current_handle()? {
        0 => Err(INVALID_CONTEXT),
        current => Ok(current),
    }
}

/// Stores `value` under `key` in `context`; `destructor` runs when the context is reset or
/// destroyed (the runtime learns so that its state for that context is gone).
///
/// # Safety
/// `destructor` is null or a function of that prototype that stays loaded.
unsafe extern "C" fn storage_put(
    context: usize,
    key: usize,
    value: usize,
    destructor: Option<StorageDestructor>,
) -> u32 {
    guard("CONTEXT_LOCAL_STORAGE[0]", || {
        let context = storage_context(context)?;
        device::driver()?.storage_put(context, key, value, destructor)
    })
}

extern "C" fn storage_delete(context: usize, key: usize) -> u32 {
    guard("CONTEXT_LOCAL_STORAGE[1]", || {
        let context = storage_context(context)?;
        device::driver()?.storage_delete(context, key)
    })
}

/// The value under `key` (`CUDA_ERROR_INVALID_HANDLE` when nothing is stored).
///
/// # Safety
/// `value` is null or valid for a write.
unsafe extern "C" fn storage_get(value: *mut usize, context: usize, key: usize) -> u32 {
    guard("CONTEXT_LOCAL_STORAGE[2]", || {
        let context = storage_context(context)?;
        let found = device::driver()?.storage_get(context, key)?;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { value.write(found) };
        Ok(())
    })
}

// ---- CONTEXT_CHECKS ----

/// Reports nothing unusual about a context: 0 in the first result, the second left as it is
/// (ZLUDA saw NVIDIA's driver answer so on ordinary contexts).
///
/// # Safety
/// `result` is null or valid for a write.
unsafe extern "C" fn context_check(
    _context: usize,
    result: *mut u32,
    _: *mut *const c_void,
) -> u32 {
    if result.is_null() {
        return INVALID_VALUE.0;
    }
    // SAFETY: checked non-null; the caller's out-parameter.
    unsafe { result.write(0) };
    CUDA_SUCCESS
}

/// 0: no flag of the kind this entry reports is ever set on the shim.
extern "C" fn no_context_flags() -> u32 {
    0
}

// ---- INTEGRITY_CHECK ----

/// The runtime checks that its driver is NVIDIA's: it asks for a keyed hash (HMAC-MD2) of
/// values both sides know — its version, the time it passes, the process and thread, where the
/// driver's tables are, and each device's UUID and PCI location — and compares it with its own.
/// Versions ending in 0 or 1 get fixed answers. The facts (key, inputs, layout) are ZLUDA's.
///
/// # Safety
/// `result` is null or valid for a write of 16 bytes.
unsafe extern "C" fn integrity_check(
    version: u32,
    unix_seconds: u64,
    result: *mut [u64; 2],
) -> u32 {
    guard("INTEGRITY_CHECK[1]", || {
        if result.is_null() {
            return Err(INVALID_VALUE);
        }
        let answer = match version % 10 {
            0 => [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            1 => [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            _ => integrity_hash(version, unix_seconds)?,
        };
        // SAFETY: checked non-null; the caller's out-parameter.
        unsafe { result.write(answer) };
        Ok(())
    })
}

/// The HMAC-MD2 of [`integrity_check`] for this process, thread and devices.
fn integrity_hash(version: u32, unix_seconds: u64) -> CuResult<[u64; 2]> {
    // Not `initialized()`: a device's sticky fault does not change what the hash covers.
    let driver = device::driver()?;
    let mut message = Vec::with_capacity(48 + 28 * driver.count());
    message.extend_from_slice(&(driver_version() as u32).to_ne_bytes());
    message.extend_from_slice(&version.to_ne_bytes());
    message.extend_from_slice(&std::process::id().to_ne_bytes());
    // SAFETY: pthread_self has no preconditions.
    let thread = unsafe { libc::pthread_self() } as u32;
    message.extend_from_slice(&thread.to_ne_bytes());
    for address in [
        CUDART_INTERFACE.as_ptr() as usize,
        INTEGRITY_CHECK.as_ptr() as usize,
        INTEGRITY_CHECK[1].0 as usize,
    ] {
        message.extend_from_slice(&address.to_ne_bytes());
    }
    message.extend_from_slice(&unix_seconds.to_ne_bytes());
    for ordinal in 0..driver.count() as i32 {
        message.extend_from_slice(&device_uuid(ordinal));
        for attribute in [50, 33, 34] {
            // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, _BUS_ID, _DEVICE_ID
            let value = crate::exports::attribute(attribute, ordinal)?;
            message.extend_from_slice(&value.to_ne_bytes());
        }
    }
    let digest = hmac_md2(&INTEGRITY_KEY, &message);
    let word = |half: &[u8]| u64::from_ne_bytes(half.try_into().expect("8 bytes"));
    Ok([word(&digest[..8]), word(&digest[8..])])
}

/// The key of the runtime's HMAC.
const INTEGRITY_KEY: [u8; 16] = [
    0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F,
];

/// HMAC (RFC 2104) over MD2, whose block is 16 bytes: the key fills one block exactly.
fn hmac_md2(key: &[u8; 16], message: &[u8]) -> [u8; 16] {
    let mut inner = Md2::default();
    inner.update(&key.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Md2::default();
    outer.update(&key.map(|b| b ^ 0x5c));
    outer.update(&inner.finish());
    outer.finish()
}

/// MD2 (RFC 1319).
struct Md2 {
    /// The 48-byte state; its first 16 bytes are the digest.
    state: [u8; 48],
    checksum: [u8; 16],
    /// The block being filled and how much of it is.
    block: [u8; 16],
    filled: usize,
}

impl Default for Md2 {
    fn default() -> Md2 {
        Md2 {
            state: [0; 48],
            checksum: [0; 16],
            block: [0; 16],
            filled: 0,
        }
    }
}

impl Md2 {
    fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.block[self.filled] = byte;
            self.filled += 1;
            if self.filled == 16 {
                self.filled = 0;
                let block = self.block;
                self.compress(&block);
            }
        }
    }

    /// Processes one block: the checksum, then 18 rounds over the state.
    fn compress(&mut self, block: &[u8; 16]) {
        let mut last = self.checksum[15];
        for (c, &b) in self.checksum.iter_mut().zip(block) {
            *c ^= MD2_S[usize::from(b ^ last)];
            last = *c;
        }
        for (i, &b) in block.iter().enumerate() {
            self.state[16 + i] = b;
            self.state[32 + i] = self.state[i] ^ b;
        }
        let mut t = 0u8;
        for round in 0..18u8 {
            for x in self.state.iter_mut() {
                *x ^= MD2_S[usize::from(t)];
                t = *x;
            }
            t = t.wrapping_add(round);
        }
    }

    /// Pads (n bytes of value n, 1 ≤ n ≤ 16), appends the checksum, returns the digest.
    fn finish(mut self) -> [u8; 16] {
        let pad = 16 - self.filled;
        self.update(&[pad as u8; 16][..pad]);
        let checksum = self.checksum;
        // The checksum block itself must not update the checksum it is taken from: compress
        // updates `self.checksum`, but `checksum` was copied before, as RFC 1319 specifies.
        self.compress(&checksum);
        self.state[..16].try_into().expect("16 bytes")
    }
}

/// MD2's substitution table (RFC 1319: a permutation of 0..=255 built from the digits of π).
const MD2_S: [u8; 256] = [
    0x29, 0x2e, 0x43, 0xc9, 0xa2, 0xd8, 0x7c, 0x01, 0x3d, 0x36, 0x54, 0xa1, 0xec, 0xf0, 0x06, 0x13,
    0x62, 0xa7, 0x05, 0xf3, 0xc0, 0xc7, 0x73, 0x8c, 0x98, 0x93, 0x2b, 0xd9, 0xbc, 0x4c, 0x82, 0xca,
    0x1e, 0x9b, 0x57, 0x3c, 0xfd, 0xd4, 0xe0, 0x16, 0x67, 0x42, 0x6f, 0x18, 0x8a, 0x17, 0xe5, 0x12,
    0xbe, 0x4e, 0xc4, 0xd6, 0xda, 0x9e, 0xde, 0x49, 0xa0, 0xfb, 0xf5, 0x8e, 0xbb, 0x2f, 0xee, 0x7a,
    0xa9, 0x68, 0x79, 0x91, 0x15, 0xb2, 0x07, 0x3f, 0x94, 0xc2, 0x10, 0x89, 0x0b, 0x22, 0x5f, 0x21,
    0x80, 0x7f, 0x5d, 0x9a, 0x5a, 0x90, 0x32, 0x27, 0x35, 0x3e, 0xcc, 0xe7, 0xbf, 0xf7, 0x97, 0x03,
    0xff, 0x19, 0x30, 0xb3, 0x48, 0xa5, 0xb5, 0xd1, 0xd7, 0x5e, 0x92, 0x2a, 0xac, 0x56, 0xaa, 0xc6,
    0x4f, 0xb8, 0x38, 0xd2, 0x96, 0xa4, 0x7d, 0xb6, 0x76, 0xfc, 0x6b, 0xe2, 0x9c, 0x74, 0x04, 0xf1,
    0x45, 0x9d, 0x70, 0x59, 0x64, 0x71, 0x87, 0x20, 0x86, 0x5b, 0xcf, 0x65, 0xe6, 0x2d, 0xa8, 0x02,
    0x1b, 0x60, 0x25, 0xad, 0xae, 0xb0, 0xb9, 0xf6, 0x1c, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7e, 0x0f,
    0x55, 0x47, 0xa3, 0x23, 0xdd, 0x51, 0xaf, 0x3a, 0xc3, 0x5c, 0xf9, 0xce, 0xba, 0xc5, 0xea, 0x26,
    0x2c, 0x53, 0x0d, 0x6e, 0x85, 0x28, 0x84, 0x09, 0xd3, 0xdf, 0xcd, 0xf4, 0x41, 0x81, 0x4d, 0x52,
    0x6a, 0xdc, 0x37, 0xc8, 0x6c, 0xc1, 0xab, 0xfa, 0x24, 0xe1, 0x7b, 0x08, 0x0c, 0xbd, 0xb1, 0x4a,
    0x78, 0x88, 0x95, 0x8b, 0xe3, 0x63, 0xe8, 0x6d, 0xe9, 0xcb, 0xd5, 0xfe, 0x3b, 0x00, 0x1d, 0x39,
    0xf2, 0xef, 0xb7, 0x0e, 0x66, 0x58, 0xd0, 0xe4, 0xa6, 0x77, 0x72, 0xf8, 0xeb, 0x75, 0x4b, 0x0a,
    0x31, 0x44, 0x50, 0xb4, 0x8f, 0xed, 0x1f, 0x1a, 0xdb, 0x99, 0x8d, 0x33, 0x9f, 0x11, 0x83, 0x14,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn md2(message: &[u8]) -> String {
        let mut md2 = Md2::default();
        md2.update(message);
        hex(&md2.finish())
    }

    #[test]
    fn md2_matches_rfc_1319() {
        assert_eq!(md2(b""), "8350e5a3e24c153df2275c9f80692773");
        assert_eq!(md2(b"a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
        assert_eq!(md2(b"abc"), "da853b0d3f88d99b30283a69e6ded6bb");
        assert_eq!(md2(b"message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
        assert_eq!(
            md2(b"abcdefghijklmnopqrstuvwxyz"),
            "4e8ddff3650292ab5a4108c3aa47940b"
        );
        let digits =
            b"12345678901234567890123456789012345678901234567890123456789012345678901234567890";
        assert_eq!(md2(digits), "d5976f79d83d3a0dc9806c3c66f3efd8");
    }

    #[test]
    fn md2_s_is_a_permutation() {
        let mut seen = [false; 256];
        for &s in &MD2_S {
            seen[usize::from(s)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn tables_have_their_size_and_distinct_uuids() {
        for (i, table) in TABLES.iter().enumerate() {
            if table.name != "CONTEXT_LOCAL_STORAGE_INTERFACE_V0301" {
                assert_eq!(
                    table.words[0].0 as usize,
                    table.words.len() * 8,
                    "{}",
                    table.name
                );
            }
            assert!(TABLES[..i].iter().all(|t| t.id != table.id));
            assert!(table.words.len() <= MAX_WORDS, "{}", table.name);
        }
        assert_eq!(
            uuid_text(&TABLES[0].id),
            "{6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9}"
        );
    }

    #[test]
    fn an_unknown_table_is_invalid_value() {
        let mut table = std::ptr::null();
        // SAFETY: valid pointers.
        let result = unsafe { get(&mut table, &[0; 16]) };
        assert_eq!(result, Err(INVALID_VALUE));
        assert!(table.is_null());
    }

    #[test]
    fn an_unserved_entry_says_not_supported_and_each_is_reported_once() {
        // SAFETY: the unserved entries read no argument.
        assert_eq!(unsafe { unserved::<0, 3>() }, NOT_SUPPORTED.0);
        assert!(!first_call(0, 3), "entry 3 was just reported");
        assert!(
            first_call(0, 4),
            "another entry of the table is reported on its own"
        );
        assert!(first_call(6, 15));
        assert!(!first_call(6, 15));
    }
}
