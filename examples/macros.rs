//! The attribute-macro example (being built).

fn main() {}
