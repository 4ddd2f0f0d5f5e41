//! The vDSO: the kernel's small shared library mapped into every process (`[vdso]` in
//! `/proc/PID/maps`), the same image in every process of a boot. The recorder copies its own,
//! keeps it in the stream (`stacks.vdso`) and names vDSO frames by its build id, so
//! stacks-symbolize names `__vdso_clock_gettime` offline like any library's function.

use std::sync::OnceLock;

use object::Object;

use crate::process::maps;

/// The vDSO image and its build id (lowercase hex).
pub(crate) struct Vdso {
    pub(crate) image: Vec<u8>,
    pub(crate) build_id: String,
}

/// This process's vDSO (the kernel's), read once; `None` without one (or without a build id).
pub(crate) fn own() -> Option<&'static Vdso> {
    static VDSO: OnceLock<Option<Vdso>> = OnceLock::new();
    VDSO.get_or_init(|| {
        let image = own_image()?;
        let build_id = object::File::parse(image.as_slice())
            .ok()?
            .build_id()
            .ok()
            .flatten()
            .map(stacks_stream::hex::encode)?;
        Some(Vdso { image, build_id })
    })
    .as_ref()
}

/// A copy of this process's `[vdso]` mapping.
pub(crate) fn own_image() -> Option<Vec<u8>> {
    let text = maps::read(std::process::id()).ok()?;
    let m = maps::parse(&text)
        .into_iter()
        .find(|m| m.path == "[vdso]")?;
    let len = (m.range.end - m.range.start) as usize;
    // SAFETY: the vdso is mapped readable for its whole range in every process.
    Some(unsafe { std::slice::from_raw_parts(m.range.start as *const u8, len) }.to_vec())
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_vdso_has_a_build_id_and_clock_gettime() {
        let v = super::own().expect("a vdso with a build id");
        assert!(v.build_id.len() >= 16, "{}", v.build_id);
        assert!(v.image.starts_with(b"\x7fELF"));
        let needle = b"clock_gettime";
        assert!(v.image.windows(needle.len()).any(|w| w == needle));
    }
}
