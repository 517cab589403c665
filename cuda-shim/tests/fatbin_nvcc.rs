//! The fatbinaries of real nvcc builds (`tools/build-cuda-programs`, run first): the PTX that
//! `cuda_shim::fatbin` finds in them. Skipped, with one `SKIPPED <test>: ...` line on the
//! terminal, where the toolkit cannot be installed (it comes from PyPI).

#[path = "../../tests/support/nvcc.rs"]
mod nvcc;

use cuda_shim::fatbin::{Image, PtxEntry, read_fatbin, read_image, select_ptx};
use nvcc::built;
use std::path::Path;

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The bytes of the ELF section `name` of the ELF64 little-endian file `elf`.
fn section<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not an ELF64 file");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    // Section header: sh_name at 0, sh_offset at 0x18, sh_size at 0x20.
    let strings = u64_at(header(shstrndx) + 0x18);
    (0..shnum).find_map(|i| {
        let h = header(i);
        let start = strings + u32_at(h);
        let len = elf[start..].iter().position(|&b| b == 0)?;
        (&elf[start..start + len] == name.as_bytes())
            .then(|| &elf[u64_at(h + 0x18)..u64_at(h + 0x18) + u64_at(h + 0x20)])
    })
}

/// Every PTX entry and SASS arch of the fatbinaries in a `.nv_fatbin` section, which holds
/// them back to back, each starting at a multiple of 8; each is also read through a pointer,
/// as `__cudaRegisterFatBinary` reads it.
fn entries_of(mut fatbins: &[u8]) -> (Vec<PtxEntry>, Vec<u32>) {
    let (mut ptx, mut sass) = (Vec::new(), Vec::new());
    while !fatbins.is_empty() {
        let (image, len) = read_fatbin(fatbins).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: `fatbins` starts with the complete fatbinary just read.
        assert_eq!(unsafe { read_image(fatbins.as_ptr()) }.unwrap(), image);
        let Image::Fatbin { ptx: p, sass_archs } = image else {
            panic!("not a fatbin")
        };
        ptx.extend(p);
        sass.extend(sass_archs);
        fatbins = &fatbins[len.next_multiple_of(8).min(fatbins.len())..];
    }
    (ptx, sass)
}

#[test]
fn fatbin_of_nvcc_vector_add() {
    if built("vector_add").is_none() {
        return;
    }
    let dir = root().join("target/programs/cu");
    let shared = dir.join("vector_add");
    for binary in [shared, dir.join("vector_add-static")] {
        let elf = std::fs::read(&binary).unwrap();
        let fatbins = section(&elf, ".nv_fatbin").expect("no .nv_fatbin section");
        let (ptx, sass) = entries_of(fatbins);
        // nvcc -arch=sm_90: sm_90 SASS for the program and for its device-link stub (a fatbinary
        // of its own, registered only with -rdc=true), and compute_90 PTX (Zstandard-compressed
        // by default) for the program.
        assert_eq!(sass, [90, 90], "{}", binary.display());
        assert_eq!(ptx.len(), 1, "{}", binary.display());
        let entry = &ptx[0];
        assert_eq!(entry.arch, 90);
        assert!(entry.text.contains(".version 9.0"), "{}", entry.text);
        assert!(entry.text.contains(".target sm_90"), "{}", entry.text);
        assert!(
            entry.text.contains(".entry _Z10vector_addPKfS0_Pfi("),
            "{}",
            entry.text
        );
        assert!(select_ptx(&ptx, 80).is_none());
        assert_eq!(select_ptx(&ptx, 90), Some(entry));
        assert_eq!(select_ptx(&ptx, 100), Some(entry));
    }
}

#[test]
fn fatbin_of_every_nvcc_program() {
    if built("vector_add").is_none() {
        return;
    }
    let root = root();
    let mut checked = 0;
    for source in std::fs::read_dir(root.join("tests/programs/cu")).unwrap() {
        let source = source.unwrap().path();
        let name = source.file_stem().unwrap().to_str().unwrap();
        let binary = root.join("target/programs/cu").join(name);
        if source.extension() != Some("cu".as_ref()) {
            continue;
        }
        let elf = std::fs::read(&binary).unwrap();
        let (ptx, _) = entries_of(section(&elf, ".nv_fatbin").expect("no .nv_fatbin section"));
        let kernels = std::fs::read_to_string(&source)
            .unwrap()
            .matches("__global__")
            .count();
        let entry = select_ptx(&ptx, 90).expect("no PTX for compute_90");
        assert_eq!(entry.text.matches(".entry ").count(), kernels, "{name}");
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} programs checked");
}
