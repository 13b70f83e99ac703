//! `podvisor validate FILE`: parses and validates a manifest; prints nothing and exits 0 when
//! it is valid, else one `error:` line per problem (file:line:column, field, message) and 2.

use std::io::Read;

/// Reads FILE (or stdin for `-`) as podvisor's commands do.
pub fn read_manifest(file: &str) -> Result<String, String> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("-: cannot read standard input: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))
}

pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let file = match args.as_slice() {
        [f] if f != "-h" && f != "--help" => f.clone(),
        [h] if h == "-h" || h == "--help" => {
            super::write_out("Usage: podvisor validate FILE\n\nParses and validates a pod manifest (FILE or - for stdin); prints nothing and\nexits 0 when it is valid.\n");
            return 0;
        }
        _ => {
            super::write_err("error: usage: podvisor validate FILE\n");
            return 2;
        }
    };
    let text = match read_manifest(&file) {
        Ok(t) => t,
        Err(e) => {
            super::write_err(&format!("error: {e}\n"));
            return 2;
        }
    };
    match podvisor_core::spec::load(&file, &text) {
        Ok(_) => 0,
        Err(errors) => {
            let mut out = String::new();
            for line in errors.to_string().lines() {
                out.push_str("error: ");
                out.push_str(line);
                out.push('\n');
            }
            super::write_err(&out);
            2
        }
    }
}
