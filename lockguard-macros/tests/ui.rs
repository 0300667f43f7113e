//! Compile-time behaviour of the attributes: every supported shape
//! compiles (and runs, on the in-memory store), every misuse is a compile
//! error pointing at the token at fault.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
