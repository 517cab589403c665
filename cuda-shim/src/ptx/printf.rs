//! Device `printf`: nvcc lowers it to `vprintf(format, args)`, where `args` is a buffer holding
//! each argument after C's default promotions (`char`/`short` as `int`, `float` as `double`), at
//! an offset aligned to its size. Each conversion is formatted by the C library's `snprintf`, so
//! the text is what the host's `printf` writes for the same values, as CUDA's is.

use std::ffi::{CString, c_char, c_int};

/// Where [`format`] reads: the next argument of `size` bytes (4 or 8) from the buffer, and the
/// NUL-terminated string at a device address (for `%s`).
pub trait Args {
    type Error;
    fn next(&mut self, size: usize) -> Result<u64, Self::Error>;
    fn string(&mut self, addr: u64) -> Result<Vec<u8>, Self::Error>;
}

/// The text `printf(fmt, args…)` writes.
pub fn format<A: Args>(fmt: &[u8], args: &mut A) -> Result<Vec<u8>, A::Error> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < fmt.len() {
        if fmt[i] != b'%' {
            out.push(fmt[i]);
            i += 1;
            continue;
        }
        if fmt.get(i + 1) == Some(&b'%') {
            out.push(b'%');
            i += 2;
            continue;
        }
        // %[flags][width][.precision][length]conversion; `*` takes an int argument.
        let mut spec = vec![b'%'];
        let mut j = i + 1;
        while j < fmt.len() && b"-+ #0'".contains(&fmt[j]) {
            spec.push(fmt[j]);
            j += 1;
        }
        for part in 0..2 {
            if part == 1 {
                if fmt.get(j) != Some(&b'.') {
                    break;
                }
                spec.push(b'.');
                j += 1;
            }
            if fmt.get(j) == Some(&b'*') {
                let v = args.next(4)? as u32 as i32;
                spec.extend_from_slice(v.to_string().as_bytes());
                j += 1;
            } else {
                while j < fmt.len() && fmt[j].is_ascii_digit() {
                    spec.push(fmt[j]);
                    j += 1;
                }
            }
        }
        let mut wide = false;
        while j < fmt.len() && b"hlLqjzt".contains(&fmt[j]) {
            // Every length but h and hh names a 64-bit integer on the device (LP64).
            if fmt[j] != b'h' {
                wide = true;
            }
            if fmt[j] != b'L' {
                spec.push(fmt[j]);
            }
            j += 1;
        }
        let Some(&conversion) = fmt.get(j) else {
            out.extend_from_slice(&fmt[i..]);
            break;
        };
        spec.push(conversion);
        let text = match conversion {
            b'd' | b'i' | b'u' | b'x' | b'X' | b'o' | b'c' => {
                if wide {
                    snprintf_i64(&spec, args.next(8)? as i64)
                } else {
                    snprintf_int(&spec, args.next(4)? as u32 as c_int)
                }
            }
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => {
                snprintf_f64(&spec, f64::from_bits(args.next(8)?))
            }
            b's' => {
                let addr = args.next(8)?;
                let s = if addr == 0 {
                    b"(null)".to_vec()
                } else {
                    args.string(addr)?
                };
                snprintf_str(&spec, &s)
            }
            b'p' => snprintf_ptr(&spec, args.next(8)?),
            // Anything else (%n included) is written as it stands.
            _ => fmt[i..=j].to_vec(),
        };
        out.extend_from_slice(&text);
        i = j + 1;
    }
    Ok(out)
}

/// Calls `f(buffer, size)` (an `snprintf` of one conversion) twice: for the length, then the text.
fn formatted(f: impl Fn(*mut c_char, usize) -> c_int) -> Vec<u8> {
    let n = f(std::ptr::null_mut(), 0);
    if n <= 0 {
        return Vec::new();
    }
    let mut buf = vec![0u8; n as usize + 1];
    f(buf.as_mut_ptr() as *mut c_char, buf.len());
    buf.truncate(n as usize);
    buf
}

/// The spec as a C string (it holds no NUL: it was built from bytes of a C string).
fn c_spec(spec: &[u8]) -> CString {
    CString::new(spec).unwrap_or_default()
}

fn snprintf_int(spec: &[u8], v: c_int) -> Vec<u8> {
    let spec = c_spec(spec);
    // SAFETY: `spec` is one conversion that takes an int (d, i, u, x, X, o or c, with no length
    // or h/hh) and `v` is an int; `buf` has `size` writable bytes (or is null with size 0).
    formatted(|buf, size| unsafe { libc::snprintf(buf, size, spec.as_ptr(), v) })
}

fn snprintf_i64(spec: &[u8], v: i64) -> Vec<u8> {
    let spec = c_spec(spec);
    // SAFETY: as in `snprintf_int`, for a conversion with a 64-bit length (l, ll, j, z, t, q)
    // and a 64-bit argument.
    formatted(|buf, size| unsafe { libc::snprintf(buf, size, spec.as_ptr(), v) })
}

fn snprintf_f64(spec: &[u8], v: f64) -> Vec<u8> {
    let spec = c_spec(spec);
    // SAFETY: as in `snprintf_int`, for a floating-point conversion (no L) and a double.
    formatted(|buf, size| unsafe { libc::snprintf(buf, size, spec.as_ptr(), v) })
}

fn snprintf_str(spec: &[u8], s: &[u8]) -> Vec<u8> {
    let spec = c_spec(spec);
    let s = CString::new(s).unwrap_or_default();
    // SAFETY: as in `snprintf_int`, for %s and a NUL-terminated string.
    formatted(|buf, size| unsafe { libc::snprintf(buf, size, spec.as_ptr(), s.as_ptr()) })
}

fn snprintf_ptr(spec: &[u8], v: u64) -> Vec<u8> {
    let spec = c_spec(spec);
    let p = v as usize as *const libc::c_void;
    // SAFETY: as in `snprintf_int`, for %p and a pointer (printed, never dereferenced).
    formatted(|buf, size| unsafe { libc::snprintf(buf, size, spec.as_ptr(), p) })
}
