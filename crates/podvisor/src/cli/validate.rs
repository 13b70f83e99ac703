//! `podvisor validate FILE`: parses and validates a manifest; prints nothing and exits 0 when
//! it is valid, else one `error:` line per problem (file:line:column, field, message) and 2.

pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match args.as_slice() {
        [h] if h == "-h" || h == "--help" => {
            super::write_out("Usage: podvisor validate FILE\n\nParses and validates a pod manifest (FILE or - for stdin); prints nothing and\nexits 0 when it is valid.\n");
            0
        }
        [file] if !super::manifest::is_option(file) => match super::manifest::load(file) {
            Ok(_) => 0,
            Err(code) => code,
        },
        _ => {
            super::write_err("error: usage: podvisor validate FILE\n");
            2
        }
    }
}
