//! `podvisor validate FILE`: parses and validates a manifest; prints nothing and exits 0 when
//! it is valid, else one `error:` line per problem (file:line:column, field, message) and 2.

/// `podvisor validate`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The pod manifest (- for stdin)
    file: String,
}

pub fn main(a: ValidateArgs) -> i32 {
    match super::manifest::load(&a.file) {
        Ok(_) => 0,
        Err(code) => code,
    }
}
