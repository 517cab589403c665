//! Fatbinaries: the device code an nvcc-built program hands the runtime
//! (`__cudaRegisterFatBinary`) or the driver (`cuModuleLoadData`, `cuLibraryLoadData`), and the
//! PTX inside it, which the shim can run where a GPU would run the SASS.
//!
//! What a program may pass (little-endian throughout; measured on nvcc 13.0.88 output, layouts
//! cross-checked with ZLUDA's and LLVM's readers):
//!
//! - A **wrapper** `__fatBinC_Wrapper_t` (section `.nvFatBinSegment`), 24 bytes:
//!   `u32 magic 0x466243b1, u32 version, const void *data, const void *filename_or_fatbins`.
//!   Version 1: `data` is one fatbinary; a default (whole-program) build registers one such
//!   wrapper per translation unit, whose fatbinary holds its SASS and PTX. Version 2 comes from
//!   separate compilation (`-rdc=true`): the device-link stub (`crt/link.stub`) registers one
//!   wrapper for the program, whose `data` is the linked SASS (no PTX) and whose
//!   `filename_or_fatbins` is a NULL-terminated array of the translation units' fatbinaries
//!   (section `__nv_relfatbin`: relocatable SASS and the PTX). A default build also carries a
//!   device-link fatbinary (SASS only) in `.nv_fatbin`, never registered.
//! - A **fatbinary** (section `.nv_fatbin`): a 16-byte header `u32 magic 0xBA55ED50,
//!   u16 version 1, u16 header_size 16, u64 files_size`, then `files_size` bytes of entries.
//! - An ELF (a cubin) or NUL-terminated PTX text, as `cuModuleLoadData` accepts.
//!
//! Each fatbinary entry has a header (`header_size` 0x40 for ELF, 0x50 for PTX, 0x60 for the PTX
//! of `-rdc=true`) followed by its
//! payload; the next entry starts `header_size + padded_size` bytes after this one. Offsets:
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0x00 | u16 | kind: 1 PTX, 2 ELF (others skipped) |
//! | 0x02 | u16 | version 0x0101 |
//! | 0x04 | u32 | header_size |
//! | 0x08 | u64 | padded_size: payload bytes stored, a multiple of 8 |
//! | 0x10 | u32 | compressed_size (0 when stored uncompressed) |
//! | 0x18 | u16, u16 | minor, major version of the payload (PTX ISA 9.0 for nvcc 13.0) |
//! | 0x1c | u32 | arch: 90 for sm_90 SASS or compute_90 PTX |
//! | 0x28 | u64 | flags: 0x1 64-bit, 0x10 Linux host, 0x2000 LZ4, 0x8000 Zstandard |
//! | 0x38 | u64 | uncompressed size (0 when stored uncompressed) |
//!
//! Compression, by nvcc 13's `-compress-mode`: `default` (and `balance`) stores the PTX as one
//! Zstandard frame and the SASS uncompressed; `size` compresses both with Zstandard; `speed`
//! stores the PTX as one raw LZ4 block (no frame, no size prefix; CUDA 12's default); `none`
//! stores both uncompressed. Uncompressed PTX is padded with NUL bytes, which are stripped.

use std::ffi::CStr;
use std::fmt;

/// One PTX entry of a fatbinary (decompressed), e.g. arch 90 for compute_90.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxEntry {
    pub arch: u32,
    pub text: String,
}

/// What an image pointer refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    /// PTX entries found (possibly none usable), plus the archs of the SASS (ELF) entries.
    Fatbin {
        ptx: Vec<PtxEntry>,
        sass_archs: Vec<u32>,
    },
    /// A bare PTX text module.
    Ptx(String),
    /// A bare cubin ELF (not runnable on the shim).
    Cubin,
}

/// The `arch` of a `NonUtf8Ptx` error about a bare PTX module (not a fatbinary entry).
pub const BARE_PTX: u32 = 0;

/// Why an image could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FatbinError {
    /// The image pointer (or a fatbinary pointer inside a wrapper) is NULL.
    NullImage,
    /// A structure does not start with its magic number.
    BadMagic { what: &'static str, found: u32 },
    /// A wrapper or fatbinary version this reader does not know.
    BadVersion { what: &'static str, found: u32 },
    /// A structure claims more bytes than there are, or fewer than its own fields.
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    /// A size beyond 4 GiB, taken as corruption rather than allocated or read.
    TooLarge { what: &'static str, size: u64 },
    /// An entry's flags name no compression this reader knows, or two at once.
    UnknownCompression { arch: u32, flags: u64 },
    /// A compressed entry did not decompress to the size its header gives.
    DecompressionFailed {
        arch: u32,
        algorithm: &'static str,
        reason: String,
    },
    /// PTX that is not UTF-8 (PTX is ASCII).
    NonUtf8Ptx { arch: u32, valid_up_to: usize },
}

impl fmt::Display for FatbinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FatbinError::NullImage => write!(f, "the image pointer is NULL"),
            FatbinError::BadMagic { what, found } => {
                write!(f, "not a {what}: magic number {found:#010x}")
            }
            FatbinError::BadVersion { what, found } => write!(f, "{what} version {found} unknown"),
            FatbinError::Truncated {
                what,
                needed,
                available,
            } => write!(
                f,
                "{what} truncated: needs {needed} bytes, {available} there"
            ),
            FatbinError::TooLarge { what, size } => {
                write!(f, "{what} of {size} bytes: implausibly large")
            }
            FatbinError::UnknownCompression { arch, flags } => write!(
                f,
                "PTX entry for compute_{arch}: unknown compression (flags {flags:#x})"
            ),
            FatbinError::DecompressionFailed {
                arch,
                algorithm,
                reason,
            } => write!(
                f,
                "PTX entry for compute_{arch}: {algorithm} decompression failed: {reason}"
            ),
            FatbinError::NonUtf8Ptx {
                arch: BARE_PTX,
                valid_up_to,
            } => write!(
                f,
                "PTX module is not UTF-8 text (invalid byte at {valid_up_to})"
            ),
            FatbinError::NonUtf8Ptx { arch, valid_up_to } => write!(
                f,
                "PTX entry for compute_{arch} is not UTF-8 text (invalid byte at {valid_up_to})"
            ),
        }
    }
}

impl std::error::Error for FatbinError {}

const WRAPPER_MAGIC: u32 = 0x4662_43b1;
const FATBIN_MAGIC: u32 = 0xba55_ed50;
const ELF_MAGIC: u32 = u32::from_le_bytes(*b"\x7fELF");
const FATBIN_HEADER_SIZE: usize = 16;
/// The fields read from an entry header end here.
const ENTRY_FIELDS_END: usize = 0x40;
const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
const FLAG_LZ4: u64 = 0x2000;
const FLAG_ZSTD: u64 = 0x8000;
/// Larger sizes are taken as corruption rather than allocated or read from memory.
const MAX_SIZE: u64 = 1 << 32;

/// `__fatBinC_Wrapper_t`.
#[repr(C)]
struct Wrapper {
    magic: u32,
    version: u32,
    data: *const u8,
    filename_or_fatbins: *const *const u8,
}

/// More prelinked fatbinaries than this in a version 2 wrapper are taken as a missing NULL.
const MAX_PRELINKED: usize = 1 << 16;

fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

fn take<'a>(bytes: &'a [u8], len: u64, what: &'static str) -> Result<&'a [u8], FatbinError> {
    usize::try_from(len)
        .ok()
        .and_then(|len| bytes.get(..len))
        .ok_or(FatbinError::Truncated {
            what,
            needed: len,
            available: bytes.len() as u64,
        })
}

/// Reads the fatbinary at the start of `data`: its image and how many bytes it spans (header
/// and entries; in a `.nv_fatbin` section the next one starts at the next multiple of 8).
pub fn read_fatbin(data: &[u8]) -> Result<(Image, usize), FatbinError> {
    let mut ptx = Vec::new();
    let mut sass_archs = Vec::new();
    let len = parse_fatbin(data, &mut ptx, &mut sass_archs)?;
    Ok((Image::Fatbin { ptx, sass_archs }, len))
}

/// Checks a fatbinary's 16-byte header; returns the header's size and the whole fatbinary's.
fn check_header(header: &[u8]) -> Result<(u64, u64), FatbinError> {
    let magic = u32_at(header, 0);
    if magic != FATBIN_MAGIC {
        return Err(FatbinError::BadMagic {
            what: "fatbin",
            found: magic,
        });
    }
    let version = u16_at(header, 4);
    if version != 1 {
        return Err(FatbinError::BadVersion {
            what: "fatbin",
            found: version.into(),
        });
    }
    let header_size = u64::from(u16_at(header, 6));
    if header_size < FATBIN_HEADER_SIZE as u64 {
        return Err(FatbinError::Truncated {
            what: "fatbin header",
            needed: FATBIN_HEADER_SIZE as u64,
            available: header_size,
        });
    }
    Ok((header_size, header_size.saturating_add(u64_at(header, 8))))
}

/// Parses one fatbinary, adding its entries to `ptx` and `sass_archs`; returns its length.
fn parse_fatbin(
    data: &[u8],
    ptx: &mut Vec<PtxEntry>,
    sass_archs: &mut Vec<u32>,
) -> Result<usize, FatbinError> {
    let (header_size, total) =
        check_header(take(data, FATBIN_HEADER_SIZE as u64, "fatbin header")?)?;
    let mut entries = &take(data, total, "fatbin")?[header_size as usize..];
    while !entries.is_empty() {
        let fields = take(entries, ENTRY_FIELDS_END as u64, "fatbin entry header")?;
        let entry_header_size = u64::from(u32_at(fields, 4));
        if entry_header_size < ENTRY_FIELDS_END as u64 {
            return Err(FatbinError::Truncated {
                what: "fatbin entry header",
                needed: ENTRY_FIELDS_END as u64,
                available: entry_header_size,
            });
        }
        let stored = u64_at(fields, 8);
        let entry = take(
            entries,
            entry_header_size.saturating_add(stored),
            "fatbin entry",
        )?;
        let payload = &entry[entry_header_size as usize..];
        let arch = u32_at(fields, 0x1c);
        match u16_at(fields, 0) {
            KIND_PTX => ptx.push(PtxEntry {
                arch,
                text: ptx_text(fields, payload)?,
            }),
            KIND_ELF => sass_archs.push(arch),
            _ => {}
        }
        entries = &entries[entry.len()..];
    }
    Ok(total as usize)
}

/// The text of a PTX entry whose header fields are `fields` and stored payload `payload`.
fn ptx_text(fields: &[u8], payload: &[u8]) -> Result<String, FatbinError> {
    let arch = u32_at(fields, 0x1c);
    let flags = u64_at(fields, 0x28);
    let compressed_size = u64::from(u32_at(fields, 0x10));
    let size = u64_at(fields, 0x38);
    let mut bytes = match (flags & FLAG_LZ4 != 0, flags & FLAG_ZSTD != 0) {
        (false, false) if compressed_size == 0 => payload.to_vec(),
        (true, false) => decompress(arch, "LZ4", payload, compressed_size, size, |src, out| {
            lz4_flex::block::decompress_into(src, out)
                .map_err(|e| e.to_string())
                .map(|n| out.truncate(n))
        })?,
        (false, true) => decompress(
            arch,
            "Zstandard",
            payload,
            compressed_size,
            size,
            |src, out| {
                // Decodes into the vector's capacity (`size` bytes), never beyond.
                out.clear();
                ruzstd::decoding::FrameDecoder::new()
                    .decode_all_to_vec(src, out)
                    .map_err(|e| e.to_string())
            },
        )?,
        _ => return Err(FatbinError::UnknownCompression { arch, flags }),
    };
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    String::from_utf8(bytes).map_err(|e| FatbinError::NonUtf8Ptx {
        arch,
        valid_up_to: e.utf8_error().valid_up_to(),
    })
}

/// Decompresses the first `compressed_size` bytes of `payload` with `algorithm`, which gets
/// them and a buffer of `size` bytes and leaves in it what it decoded; anything but exactly
/// `size` bytes is a failure.
fn decompress(
    arch: u32,
    algorithm: &'static str,
    payload: &[u8],
    compressed_size: u64,
    size: u64,
    decode: impl FnOnce(&[u8], &mut Vec<u8>) -> Result<(), String>,
) -> Result<Vec<u8>, FatbinError> {
    let failed = |reason: String| FatbinError::DecompressionFailed {
        arch,
        algorithm,
        reason,
    };
    let src = take(payload, compressed_size, "compressed PTX")?;
    if size > MAX_SIZE {
        return Err(FatbinError::TooLarge {
            what: "decompressed PTX",
            size,
        });
    }
    let mut out = vec![0; size as usize];
    decode(src, &mut out).map_err(failed)?;
    if out.len() as u64 != size {
        return Err(failed(format!(
            "{} bytes decoded, the header says {size}",
            out.len()
        )));
    }
    Ok(out)
}

/// Which structure a pointer starts with, found by comparing one byte at a time, so that a
/// NUL-terminated PTX text is never read past its NUL (no magic number contains a 0 byte).
///
/// # Safety
/// `image` points to one of the structures `read_image` accepts.
unsafe fn magic_of(image: *const u8) -> Option<u32> {
    [WRAPPER_MAGIC, FATBIN_MAGIC, ELF_MAGIC]
        .into_iter()
        .find(|magic| {
            magic.to_le_bytes().iter().enumerate().all(|(i, &byte)| {
                // SAFETY: the bytes before i matched a magic number, which has no 0 byte, so
                // byte i is within the structure (a PTX text's NUL comes at the latest there).
                unsafe { *image.add(i) == byte }
            })
        })
}

/// Reads the fatbinary at `data` from memory.
///
/// # Safety
/// `data` is non-null and points to a fatbinary header followed by the entries it describes.
unsafe fn fatbin_at(
    data: *const u8,
    ptx: &mut Vec<PtxEntry>,
    sass_archs: &mut Vec<u32>,
) -> Result<(), FatbinError> {
    // SAFETY: `data` points to a fatbinary, which starts with its 16-byte header.
    let header = unsafe { std::slice::from_raw_parts(data, FATBIN_HEADER_SIZE) };
    let (_, total) = check_header(header)?;
    if total > MAX_SIZE {
        return Err(FatbinError::TooLarge {
            what: "fatbin",
            size: total,
        });
    }
    // SAFETY: a fatbinary spans its header and the files_size bytes of entries after it.
    let bytes = unsafe { std::slice::from_raw_parts(data, total as usize) };
    parse_fatbin(bytes, ptx, sass_archs).map(drop)
}

/// Reads the image a program passes to `__cudaRegisterFatBinary` or `cuModuleLoadData`.
///
/// # Safety
/// `image` points to a `__fatBinC_Wrapper_t` (magic 0x466243b1) whose fatbinary pointers are
/// valid, a fatbin header (magic 0xBA55ED50) followed by its entries, an ELF, or NUL-terminated
/// PTX text, and that memory is not written during the call.
pub unsafe fn read_image(image: *const u8) -> Result<Image, FatbinError> {
    if image.is_null() {
        return Err(FatbinError::NullImage);
    }
    let mut ptx = Vec::new();
    let mut sass_archs = Vec::new();
    // SAFETY: the caller's contract is magic_of's.
    match unsafe { magic_of(image) } {
        Some(WRAPPER_MAGIC) => {
            // SAFETY: the image is a wrapper (its alignment is not relied on).
            let wrapper = unsafe { image.cast::<Wrapper>().read_unaligned() };
            debug_assert_eq!(wrapper.magic, WRAPPER_MAGIC);
            if wrapper.version != 1 && wrapper.version != 2 {
                return Err(FatbinError::BadVersion {
                    what: "fatbin wrapper",
                    found: wrapper.version,
                });
            }
            if wrapper.data.is_null() {
                return Err(FatbinError::NullImage);
            }
            // SAFETY: a wrapper's data points to a fatbinary (caller's contract).
            unsafe { fatbin_at(wrapper.data, &mut ptx, &mut sass_archs) }?;
            let list = wrapper.filename_or_fatbins;
            if wrapper.version == 2 && !list.is_null() {
                for i in 0..MAX_PRELINKED {
                    // SAFETY: a version 2 wrapper's list is a NULL-terminated array of
                    // fatbinary pointers, and no NULL came before element i.
                    let fatbin = unsafe { list.add(i).read_unaligned() };
                    if fatbin.is_null() {
                        break;
                    }
                    // SAFETY: every non-NULL element points to a fatbinary.
                    unsafe { fatbin_at(fatbin, &mut ptx, &mut sass_archs) }?;
                }
            }
        }
        // SAFETY: the image is a fatbinary (caller's contract).
        Some(FATBIN_MAGIC) => unsafe { fatbin_at(image, &mut ptx, &mut sass_archs) }?,
        Some(_) => return Ok(Image::Cubin),
        None => {
            // SAFETY: anything else is NUL-terminated PTX text (caller's contract).
            let text = unsafe { CStr::from_ptr(image.cast()) };
            return match text.to_str() {
                // Every PTX module starts with a .version directive (after comments).
                Ok(text) if text.contains(".version") => Ok(Image::Ptx(text.to_owned())),
                Ok(_) => {
                    let mut first = [0; 4];
                    first
                        .iter_mut()
                        .zip(text.to_bytes())
                        .for_each(|(w, b)| *w = *b);
                    Err(FatbinError::BadMagic {
                        what: "fatbin wrapper, fatbin, ELF or PTX module",
                        found: u32::from_le_bytes(first),
                    })
                }
                Err(e) => Err(FatbinError::NonUtf8Ptx {
                    arch: BARE_PTX,
                    valid_up_to: e.valid_up_to(),
                }),
            };
        }
    }
    Ok(Image::Fatbin { ptx, sass_archs })
}

/// The PTX text of a module for a device of compute capability `major*10+minor`: every entry of
/// the architecture [`select_ptx`] chooses, in order. A `-rdc=true` program registers one
/// wrapper listing the fatbinary of each translation unit, so its kernels are spread over
/// several entries of one architecture, which together are its device code (what nvlink links).
pub fn module_ptx(entries: &[PtxEntry], capability: u32) -> Option<String> {
    let arch = select_ptx(entries, capability)?.arch;
    let units: Vec<&str> = entries
        .iter()
        .filter(|e| e.arch == arch)
        .map(|e| e.text.as_str())
        .collect();
    Some(units.join("\n"))
}

/// The entry NVIDIA's driver would JIT for a device of compute capability `major*10+minor`:
/// the highest PTX arch <= capability (the first such entry when several have it); None = no
/// kernel image for this device.
pub fn select_ptx(entries: &[PtxEntry], capability: u32) -> Option<&PtxEntry> {
    entries
        .iter()
        .filter(|entry| entry.arch <= capability)
        .fold(None, |best: Option<&PtxEntry>, entry| match best {
            Some(best) if best.arch >= entry.arch => Some(best),
            _ => Some(entry),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n// Generated by hand\n//\n\n.version 9.0\n.target sm_90\n\
                       .address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n";

    /// How a synthetic entry stores its payload.
    enum Stored {
        Plain,
        Lz4,
        Zstd,
    }

    /// One fatbinary entry laid out as nvcc 13 writes it.
    fn entry(kind: u16, arch: u32, payload: &[u8], stored: Stored) -> Vec<u8> {
        let header_size = if kind == KIND_PTX { 0x50 } else { 0x40 };
        entry_with_header(kind, arch, payload, stored, header_size)
    }

    fn entry_with_header(
        kind: u16,
        arch: u32,
        payload: &[u8],
        stored: Stored,
        header_size: u32,
    ) -> Vec<u8> {
        let (bytes, flags, compressed, size) = match stored {
            Stored::Plain => (payload.to_vec(), 0x11, 0, 0),
            Stored::Lz4 => {
                let c = lz4_flex::block::compress(payload);
                let len = c.len();
                (c, 0x11 | FLAG_LZ4, len, payload.len())
            }
            Stored::Zstd => {
                let c = ruzstd::encoding::compress_to_vec(
                    payload,
                    ruzstd::encoding::CompressionLevel::Fastest,
                );
                let len = c.len();
                (c, 0x11 | FLAG_ZSTD, len, payload.len())
            }
        };
        let padded = bytes.len().div_ceil(8) * 8;
        let mut e = vec![0u8; header_size as usize];
        e[0..2].copy_from_slice(&kind.to_le_bytes());
        e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        e[4..8].copy_from_slice(&header_size.to_le_bytes());
        e[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        e[0x10..0x14].copy_from_slice(&(compressed as u32).to_le_bytes());
        e[0x1c..0x20].copy_from_slice(&arch.to_le_bytes());
        e[0x28..0x30].copy_from_slice(&flags.to_le_bytes());
        e[0x38..0x40].copy_from_slice(&(size as u64).to_le_bytes());
        e.extend_from_slice(&bytes);
        e.resize(header_size as usize + padded, 0);
        e
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let files: Vec<u8> = entries.concat();
        let mut f = Vec::new();
        f.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&(files.len() as u64).to_le_bytes());
        f.extend_from_slice(&files);
        f
    }

    fn elf() -> Vec<u8> {
        let mut e = b"\x7fELF\x02\x01\x01\x41".to_vec();
        e.resize(64, 0);
        e
    }

    fn ptx_of(image: Image) -> (Vec<PtxEntry>, Vec<u32>) {
        match image {
            Image::Fatbin { ptx, sass_archs } => (ptx, sass_archs),
            other => panic!("not a fatbin: {other:?}"),
        }
    }

    #[test]
    fn fatbin_uncompressed_ptx_and_sass() {
        let f = fatbin(&[
            entry(KIND_ELF, 90, &elf(), Stored::Plain),
            entry(KIND_PTX, 90, PTX.as_bytes(), Stored::Plain),
        ]);
        let (image, len) = read_fatbin(&f).unwrap();
        assert_eq!(len, f.len());
        let (ptx, sass) = ptx_of(image);
        assert_eq!(sass, [90]);
        // The NUL padding up to a multiple of 8 is gone.
        assert_eq!(
            ptx,
            [PtxEntry {
                arch: 90,
                text: PTX.into()
            }]
        );
    }

    #[test]
    fn fatbin_compressed_ptx_lz4_and_zstd() {
        for stored in [Stored::Lz4, Stored::Zstd] {
            let f = fatbin(&[
                entry(KIND_PTX, 52, PTX.as_bytes(), Stored::Plain),
                entry(KIND_ELF, 90, &elf(), Stored::Zstd),
                entry(KIND_PTX, 90, PTX.as_bytes(), stored),
            ]);
            let (ptx, sass) = ptx_of(read_fatbin(&f).unwrap().0);
            assert_eq!(sass, [90]);
            assert_eq!(ptx.len(), 2);
            assert_eq!((ptx[1].arch, ptx[1].text.as_str()), (90, PTX));
        }
    }

    #[test]
    fn fatbin_entry_headers_of_any_size() {
        // -rdc=true: PTX entry headers of 0x60 bytes.
        let f = fatbin(&[
            entry_with_header(KIND_ELF, 90, &elf(), Stored::Zstd, 0x40),
            entry_with_header(KIND_PTX, 90, PTX.as_bytes(), Stored::Zstd, 0x60),
        ]);
        let (ptx, sass) = ptx_of(read_fatbin(&f).unwrap().0);
        assert_eq!((ptx[0].text.as_str(), sass), (PTX, vec![90]));
    }

    #[test]
    fn fatbin_skips_unknown_kinds() {
        let f = fatbin(&[
            entry(4, 90, b"not PTX, not ELF", Stored::Plain),
            entry(KIND_PTX, 90, PTX.as_bytes(), Stored::Plain),
        ]);
        let (ptx, sass) = ptx_of(read_fatbin(&f).unwrap().0);
        assert_eq!((ptx.len(), sass.len()), (1, 0));
    }

    #[test]
    fn fatbin_read_image_from_every_kind_of_pointer() {
        let plain = fatbin(&[
            entry(KIND_ELF, 90, &elf(), Stored::Plain),
            entry(KIND_PTX, 90, PTX.as_bytes(), Stored::Zstd),
        ]);
        // SAFETY: a complete fatbinary.
        let (ptx, _) = ptx_of(unsafe { read_image(plain.as_ptr()) }.unwrap());
        assert_eq!(ptx[0].text, PTX);

        // Version 1 wrapper.
        let v1 = Wrapper {
            magic: WRAPPER_MAGIC,
            version: 1,
            data: plain.as_ptr(),
            filename_or_fatbins: std::ptr::null(),
        };
        // SAFETY: a wrapper pointing to a complete fatbinary.
        let (ptx, sass) = ptx_of(unsafe { read_image((&raw const v1).cast()) }.unwrap());
        assert_eq!((ptx.len(), sass), (1, vec![90]));

        // Version 2, as nvcc 13 registers an -rdc=true program: the device-link fatbinary (SASS
        // only) and a NULL-terminated list of the translation units' fatbinaries.
        let dlink = fatbin(&[entry(KIND_ELF, 90, &elf(), Stored::Plain)]);
        let other = fatbin(&[entry(KIND_PTX, 80, PTX.as_bytes(), Stored::Lz4)]);
        let list = [plain.as_ptr(), other.as_ptr(), std::ptr::null()];
        let v2 = Wrapper {
            magic: WRAPPER_MAGIC,
            version: 2,
            data: dlink.as_ptr(),
            filename_or_fatbins: list.as_ptr(),
        };
        // SAFETY: a wrapper whose fatbinary pointers are complete fatbinaries.
        let (ptx, sass) = ptx_of(unsafe { read_image((&raw const v2).cast()) }.unwrap());
        assert_eq!(sass, [90, 90]);
        assert_eq!(ptx.iter().map(|e| e.arch).collect::<Vec<_>>(), [90, 80]);

        let text = std::ffi::CString::new(PTX).unwrap();
        // SAFETY: NUL-terminated PTX text.
        let image = unsafe { read_image(text.as_ptr().cast()) }.unwrap();
        assert_eq!(image, Image::Ptx(PTX.into()));

        let cubin = elf();
        // SAFETY: an ELF.
        assert_eq!(unsafe { read_image(cubin.as_ptr()) }.unwrap(), Image::Cubin);
    }

    #[test]
    fn fatbin_errors() {
        let good = fatbin(&[entry(KIND_PTX, 90, PTX.as_bytes(), Stored::Zstd)]);

        // SAFETY: NULL is checked first.
        assert_eq!(
            unsafe { read_image(std::ptr::null()) },
            Err(FatbinError::NullImage)
        );

        let mut bad = good.clone();
        bad[0] = 0;
        assert!(matches!(
            read_fatbin(&bad),
            Err(FatbinError::BadMagic {
                found: 0xba55_ed00,
                ..
            })
        ));
        let text = c"plain words, no PTX";
        // SAFETY: NUL-terminated text.
        let err = unsafe { read_image(text.as_ptr().cast()) }.unwrap_err();
        assert_eq!(
            err,
            FatbinError::BadMagic {
                what: "fatbin wrapper, fatbin, ELF or PTX module",
                found: u32::from_le_bytes(*b"plai"),
            }
        );

        let mut bad = good.clone();
        bad[4] = 2;
        assert!(matches!(
            read_fatbin(&bad),
            Err(FatbinError::BadVersion { found: 2, .. })
        ));
        let v3 = Wrapper {
            magic: WRAPPER_MAGIC,
            version: 3,
            data: good.as_ptr(),
            filename_or_fatbins: std::ptr::null(),
        };
        // SAFETY: a wrapper (whose version is rejected before anything else is read).
        let err = unsafe { read_image((&raw const v3).cast()) }.unwrap_err();
        assert_eq!(err.to_string(), "fatbin wrapper version 3 unknown");

        for cut in [8, 40, good.len() - 8] {
            let err = read_fatbin(&good[..cut]).unwrap_err();
            assert!(matches!(err, FatbinError::Truncated { .. }), "{cut}: {err}");
        }

        let mut bad = good.clone();
        bad[16 + 0x29] |= 0x20; // both LZ4 and Zstandard
        assert_eq!(
            read_fatbin(&bad).unwrap_err(),
            FatbinError::UnknownCompression {
                arch: 90,
                flags: 0xa011
            }
        );
        let mut bad = good.clone();
        bad[16 + 0x29] = 0; // no compression flag, but a compressed size
        assert!(matches!(
            read_fatbin(&bad),
            Err(FatbinError::UnknownCompression { flags: 0x11, .. })
        ));

        let mut bad = good.clone();
        let payload = 16 + 0x50;
        bad[payload + 8..payload + 16].fill(0xff); // garbage inside the Zstandard frame
        let err = read_fatbin(&bad).unwrap_err();
        assert!(
            matches!(
                err,
                FatbinError::DecompressionFailed {
                    algorithm: "Zstandard",
                    ..
                }
            ),
            "{err}"
        );
        let mut bad = good.clone();
        bad[16 + 0x3c] = 1; // 4 GiB more than the frame holds
        assert!(matches!(
            read_fatbin(&bad),
            Err(FatbinError::TooLarge { .. })
        ));
        let mut bad = good.clone();
        bad[16 + 0x38] += 1; // one byte more than the frame holds
        let err = read_fatbin(&bad).unwrap_err();
        assert!(
            matches!(err, FatbinError::DecompressionFailed { .. }),
            "{err}"
        );

        let mut latin1 = PTX.as_bytes().to_vec();
        latin1[3] = 0xe9;
        let bad = fatbin(&[entry(KIND_PTX, 90, &latin1, Stored::Lz4)]);
        let err = read_fatbin(&bad).unwrap_err();
        assert_eq!(
            err,
            FatbinError::NonUtf8Ptx {
                arch: 90,
                valid_up_to: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "PTX entry for compute_90 is not UTF-8 text (invalid byte at 3)"
        );
    }

    #[test]
    fn fatbin_module_ptx_joins_the_translation_units_of_the_chosen_arch() {
        let unit = |arch: u32, kernel: &str| PtxEntry {
            arch,
            text: PTX.replace("entry k()", &format!("entry {kernel}()")),
        };
        let entries = [
            unit(90, "a"),
            unit(80, "old"),
            unit(90, "b"),
            unit(100, "new"),
        ];
        let text = module_ptx(&entries, 90).unwrap();
        let module = crate::ptx::parse(&text).unwrap();
        let names: Vec<&str> = module.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(module_ptx(&entries, 75), None);
    }

    #[test]
    fn fatbin_select_ptx_like_the_driver() {
        let entries: Vec<PtxEntry> = [80, 52, 90, 90]
            .into_iter()
            .enumerate()
            .map(|(i, arch)| PtxEntry {
                arch,
                text: format!("entry {i}"),
            })
            .collect();
        let pick = |cap| select_ptx(&entries, cap).map(|e| e.text.as_str());
        assert_eq!(pick(50), None);
        assert_eq!(pick(52), Some("entry 1"));
        assert_eq!(pick(86), Some("entry 0"));
        assert_eq!(pick(90), Some("entry 2"));
        assert_eq!(pick(120), Some("entry 2"));
        assert_eq!(select_ptx(&[], 90), None);
    }
}
