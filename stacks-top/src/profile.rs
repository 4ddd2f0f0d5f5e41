//! A view's stacks as a [`Flame`]: the query result of [`crate::view::Planner::flame`] (each
//! distinct stack of the view with its summed value) read frame by frame, every frame named
//! as stacks-pprof names it in folded stacks (`stacks_stream::frames`: the function, else
//! where it is; inlined functions frames of their own; `;` and line breaks escaped), and
//! classed as kernel, user, JIT, Python or unresolved code for its colour.

use anyhow::{Result, anyhow};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use stacks_stream::col;
use stacks_stream::frames::{
    Frame, JIT_MODULE, NO_STACK_FRAME, PYTHON_MODULE, StackFrames, push_folded,
};

use crate::flame::{Class, Flame};

/// The class of a frame: kernel, JIT (module `[jit]`), Python (`[python]`), unresolved (no
/// function, or a marker frame such as `[no stack]`, which has no module), else user code.
pub fn class(f: &Frame<'_>) -> Class {
    if f.kernel {
        Class::Kernel
    } else if f.module == Some(JIT_MODULE) {
        Class::Jit
    } else if f.module == Some(PYTHON_MODULE) {
        Class::Python
    } else if f.function.is_none() || f.module.is_none() {
        Class::Unresolved
    } else {
        Class::User
    }
}

/// The flame of result `batches`: a `stack` column and the value `w` of each (a null value
/// counts 0, as in stacks-pprof, and stacks of 0 are left out). A null or empty stack is the one frame `[no stack]`.
pub fn flame(batches: &[RecordBatch]) -> Result<Flame> {
    let mut out = Flame::new();
    let mut frames: Vec<(String, Class)> = Vec::new();
    for batch in batches {
        let stack = batch
            .column_by_name(col::STACK)
            .ok_or_else(|| anyhow!("the view's stacks: no stack column"))?;
        let w = batch
            .column_by_name("w")
            .ok_or_else(|| anyhow!("the view's stacks: no value column"))?;
        let w = arrow_cast::cast(w, &DataType::Int64)?;
        let w = w.as_primitive::<Int64Type>();
        let stacks = StackFrames::new(stack, "the view's stacks", col::STACK)?;
        for row in 0..batch.num_rows() {
            let value = if w.is_valid(row) { w.value(row) } else { 0 };
            if value == 0 {
                // Left out of folded stacks, as stacks-pprof leaves out samples of 0.
                continue;
            }
            frames.clear();
            for i in stacks.row(row).rev() {
                if let Some(f) = stacks.frame(i) {
                    let mut name = String::new();
                    push_folded(&mut name, &f.name());
                    frames.push((name, class(&f)));
                }
            }
            if frames.is_empty() {
                frames.push((NO_STACK_FRAME.to_string(), Class::Unresolved));
            }
            out.add(frames.iter().map(|(n, c)| (n.as_str(), *c)), value);
        }
    }
    out.finish();
    Ok(out)
}

/// The unit of a flame of `kind`: the unit of its `value` (`ns`, `bytes`, `count`); every
/// kind at once is weighed in events.
pub fn unit(kind: Option<&str>) -> &'static str {
    match kind {
        Some(k) => stacks_stream::kinds::unit(k).short(),
        None => "events",
    }
}
