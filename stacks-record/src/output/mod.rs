//! The raw stream as it is written: each row's fields ([`rows`]) and the dictionary of
//! distinct stacks its stack columns point into ([`stack_table`]).

pub(crate) mod rows;
pub(crate) mod stack_table;
