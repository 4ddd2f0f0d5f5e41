//! The kernel side as user space sees it: the generated skeleton ([`abi`]), the record format
//! ([`event`]), the globals user space writes while programs run ([`globals`]), loading and
//! attaching programs ([`load`]), the `state` task iterator's driver ([`sampler`]) and records
//! made from the kernel's summing tables ([`tables`]). Depends only on [`crate::spec`].

pub(crate) mod abi;
pub(crate) mod event;
pub(crate) mod globals;
pub(crate) mod load;
pub(crate) mod sampler;
pub(crate) mod tables;
