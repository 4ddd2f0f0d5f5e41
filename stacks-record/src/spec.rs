//! The `-e` grammar: stacks-stream's ([`stacks_stream::events`], the one parser of event
//! specifications), the recorder's first layer.

pub use stacks_stream::events::*;
