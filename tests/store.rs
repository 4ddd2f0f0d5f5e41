//! End-to-end stacks-pack and stacks-query: durability, bundled queries, parameters.
