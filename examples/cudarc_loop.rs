//! A third-party CUDA client written on the `cudarc` crate: itermem's proof that a program which
//! loads the driver API dynamically — cudarc `dlopen`s `libcuda.so.1` and finds every function
//! with `dlsym` on that handle, as TensorFlow and JAX do — is seen by itermem, although it links
//! no CUDA library at all.
//!
//! A training-shaped loop without kernels (cuda-shim cannot run PTX): a context on device 0, one
//! stream, persistent "weights", then per iteration the same sequence of "activation" buffers,
//! allocated, filled from the host, copied into each other, one memset, read back and checked
//! byte for byte against a host mirror, and freed in another order than they were allocated.
//! Prints the number of bytes verified and a checksum; exits 1 on a mismatch or CUDA error.
//!
//! Weights go through cudarc's safe API (`clone_htod`: `cuMemAllocAsync` and
//! `cuMemcpyHtoDAsync_v2`); activations through its `result` layer, so their free order is
//! explicit, and their copies through `sys::cuMemcpyAsync` (unified addressing), so one helper
//! serves every direction.
//!
//! `cudarc_loop [--iters N]` (default 20), with `libcuda.so.1` on the library path.

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DriverError, result, sys};

/// Weight sizes in KiB: uploaded once, read by device-to-device copies every iteration.
const WEIGHTS_KIB: [usize; 3] = [64, 1024, 256];
/// Activation sizes in KiB, allocated in this order every iteration.
const SIZES_KIB: [usize; 8] = [4, 4096, 64, 1024, 12, 512, 2048, 256];
/// The order in which the activations are freed.
const FREE_ORDER: [usize; 8] = [3, 0, 6, 1, 7, 4, 2, 5];
/// Activation-to-activation copies, in order: (source, destination, offset in destination, size),
/// offset and size in KiB.
const ACT_COPIES: [(usize, usize, usize, usize); 3] =
    [(0, 4, 8, 4), (3, 1, 1024, 1024), (4, 7, 0, 12)];
/// Whole weights copied into activations: (weight, destination, offset in destination in KiB).
const WEIGHT_COPIES: [(usize, usize, usize); 2] = [(1, 6, 1024), (0, 2, 0)];
/// The activation set by a memset, and the activations read back and verified.
const MEMSET: usize = 5;
const READ_BACK: [usize; 6] = [1, 2, 4, 5, 6, 7];

/// Prints `what` and the error, and exits 1.
fn check<T>(r: Result<T, DriverError>, what: impl FnOnce() -> String) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("cudarc_loop: {}: {e}", what());
        std::process::exit(1)
    })
}

/// Deterministic bytes for `seed` (xorshift64).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// One copy of `len` bytes ordered on `stream`; host or device addresses on either side.
///
/// # Safety
/// Both ranges must be live and at least `len` bytes; host memory must stay alive and unchanged
/// (a source) or unread (a destination) until `stream` has been synchronized.
unsafe fn copy(stream: &CudaStream, dst: u64, src: u64, len: usize) -> Result<(), DriverError> {
    // SAFETY: the caller's contract above; the stream handle is live while `stream` is.
    unsafe { sys::cuMemcpyAsync(dst, src, len, stream.cu_stream()) }.result()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters: u64 = match args.as_slice() {
        [] => 20,
        [flag, n] if flag == "--iters" => n.parse().unwrap_or_else(|_| usage()),
        _ => usage(),
    };
    // cudarc panics when libcuda or one of its functions is missing: a CUDA error like the rest.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("cudarc_loop: {info}");
        std::process::exit(1)
    }));

    let ctx = check(CudaContext::new(0), || "context on device 0".into());
    let stream = check(ctx.new_stream(), || "stream".into());
    let (weight_sizes, sizes) = (WEIGHTS_KIB.map(|k| k << 10), SIZES_KIB.map(|k| k << 10));
    let weight_data: Vec<Vec<u8>> = (0..)
        .zip(weight_sizes)
        .map(|(w, n)| pattern(!w, n))
        .collect();
    let mut weights = Vec::new();
    for (w, data) in weight_data.iter().enumerate() {
        weights.push(check(stream.clone_htod(data), || {
            format!("upload weight {w}")
        }));
    }

    let s = stream.cu_stream();
    let (mut verified, mut checksum) = (0u64, 0xCBF2_9CE4_8422_2325u64); // FNV-1a 64
    for it in 0..iters {
        let mut bufs = Vec::new();
        for (b, &size) in sizes.iter().enumerate() {
            // SAFETY: a stream-ordered allocation on our live stream, freed below.
            let r = unsafe { result::malloc_async(s, size) };
            bufs.push(check(r, || format!("iteration {it}: allocate buffer {b}")));
        }
        // Uploaded as they are, so left untouched until the stream is synchronized.
        let uploads: Vec<Vec<u8>> = (0..)
            .zip(sizes)
            .map(|(b, n)| pattern(it << 16 | b, n))
            .collect();
        for (b, data) in uploads.iter().enumerate() {
            // SAFETY: buffer b has data.len() bytes; `uploads` lives past the synchronize.
            let r = unsafe { copy(&stream, bufs[b], data.as_ptr() as u64, data.len()) };
            check(r, || format!("iteration {it}: H2D buffer {b}"));
        }
        // The host mirror: what every buffer must hold after this iteration's operations.
        let mut expected = uploads.clone();
        for (src, dst, off, len) in ACT_COPIES.map(|(s, d, o, l)| (s, d, o << 10, l << 10)) {
            let bytes = expected[src][..len].to_vec(); // the indexing checks both ranges
            expected[dst][off..off + len].copy_from_slice(&bytes);
            // SAFETY: both ranges lie inside their buffers (checked just above).
            let r = unsafe { copy(&stream, bufs[dst] + off as u64, bufs[src], len) };
            check(r, || {
                format!("iteration {it}: D2D buffer {src} -> buffer {dst}")
            });
        }
        for (w, dst, off) in WEIGHT_COPIES.map(|(w, d, o)| (w, d, o << 10)) {
            expected[dst][off..off + weight_sizes[w]].copy_from_slice(&weight_data[w]);
            let (wptr, _record) = weights[w].device_ptr(&stream);
            // SAFETY: weight w fits in buffer dst at off (checked just above).
            let r = unsafe { copy(&stream, bufs[dst] + off as u64, wptr, weight_sizes[w]) };
            check(r, || {
                format!("iteration {it}: D2D weight {w} -> buffer {dst}")
            });
        }
        let value = (it as u8) ^ 0xA5;
        expected[MEMSET].fill(value);
        // SAFETY: the whole of buffer MEMSET, ordered on our stream.
        let r = unsafe { result::memset_d8_async(bufs[MEMSET], value, sizes[MEMSET], s) };
        check(r, || format!("iteration {it}: memset buffer {MEMSET}"));
        let mut back: Vec<Vec<u8>> = READ_BACK.iter().map(|&b| vec![0; sizes[b]]).collect();
        for (host, &b) in back.iter_mut().zip(&READ_BACK) {
            // SAFETY: buffer b has host.len() bytes; `back` is read only after the synchronize.
            let r = unsafe { copy(&stream, host.as_mut_ptr() as u64, bufs[b], host.len()) };
            check(r, || format!("iteration {it}: D2H buffer {b}"));
        }
        let r = stream.synchronize();
        check(r, || format!("iteration {it}: synchronize"));
        for (host, &b) in back.iter().zip(&READ_BACK) {
            let want = &expected[b];
            if let Some(i) = (0..host.len()).find(|&i| host[i] != want[i]) {
                let bad = host.iter().zip(want).filter(|(x, y)| x != y).count();
                let (want, got) = (want[i], host[i]);
                eprint!("cudarc_loop: iteration {it}: buffer {b} byte {i}: expected {want:#04x}, ");
                eprintln!("read {got:#04x} ({bad} of {} bytes differ)", host.len());
                std::process::exit(1);
            }
            verified += host.len() as u64;
            checksum = host.iter().fold(checksum, |h, &x| {
                (h ^ x as u64).wrapping_mul(0x100_0000_01B3)
            });
        }
        for b in FREE_ORDER {
            // SAFETY: allocated above and freed once; its pending operations are ordered before.
            let r = unsafe { result::free_async(bufs[b], s) };
            check(r, || format!("iteration {it}: free buffer {b}"));
        }
    }
    drop(weights); // cudarc frees them; errors of its destructors surface in the next call
    check(ctx.synchronize(), || "final synchronize".into());
    println!(
        "cudarc_loop: {iters} iterations, {verified} bytes verified, checksum {checksum:016x}"
    );
}

fn usage() -> ! {
    eprintln!("usage: cudarc_loop [--iters N]");
    std::process::exit(2)
}
