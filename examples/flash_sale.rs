//! The flash-sale example (being built).

fn main() {}
