//! The rules docs/architecture.md states about the code, checked so that they stay true: no
//! import cycle between the top-level modules of a crate, and no block of six or more lines
//! repeated in product code (the same lines, or lines of the same shape with other names,
//! strings and numbers). The 120-line limit on functions is clippy's (clippy.toml).
//!
//! Product code is what ships: the sources of podvisor, podvisor-core and
//! podvisor-controller, without their test modules. Tests may keep table-driven repetition.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The crates whose code ships.
const PRODUCT: [&str; 3] = ["podvisor", "podvisor-core", "podvisor-controller"];

/// How many significant lines make a repeated block.
const BLOCK: usize = 6;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    for krate in PRODUCT {
        let src = crates_dir().join(krate).join("src");
        let graph = module_graph(&src);
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "{krate}: the top-level modules import each other in a circle: {} (docs/architecture.md: imports go down only)",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn product_code_repeats_no_block_of_six_lines() {
    let files: Vec<PathBuf> = PRODUCT
        .iter()
        .flat_map(|k| rust_files(&crates_dir().join(k).join("src")))
        .filter(|p| !is_test_file(p))
        .collect();
    let found = repeated_blocks(&files);
    assert!(
        found.is_empty(),
        "blocks of {BLOCK} or more lines of the same shape, in product code (make one piece of code serve both):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_find_what_they_look_for() {
    // A planted circle and a planted repetition, so that the checks above can fail.
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    graph.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&graph), None);
    let dir = std::env::temp_dir().join(format!("podvisor-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let block = |name: &str, n: u32| {
        format!(
            "fn {name}(x: u32) -> String {{\n    let total = x * {n};\n    if total > {n} {{\n        return format!(\"{name} {{total}}\");\n    }}\n    let half = total / 2;\n    println!(\"{name}\");\n    half.to_string()\n}}\n"
        )
    };
    std::fs::write(dir.join("one.rs"), block("first", 3)).unwrap();
    std::fs::write(dir.join("two.rs"), block("second", 7)).unwrap();
    let found = repeated_blocks(&[dir.join("one.rs"), dir.join("two.rs")]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("one.rs:2-8") && found[0].contains("two.rs:2-8"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A file of unit tests (`tests.rs`, or under a `tests/` directory of `src`).
fn is_test_file(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n == "tests.rs")
        || p.components().any(|c| c.as_os_str() == "tests")
}

/// crate-level module → the crate-level modules it names (`crate::NAME`).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = top.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let tokens = lex(&product_text(&std::fs::read_to_string(&file).unwrap()));
        let edges = graph.entry(module.clone()).or_default();
        for w in tokens.windows(4) {
            if w[0].text == "crate" && w[1].text == ":" && w[2].text == ":" && w[3].text != module {
                if let Kind::Ident = w[3].kind {
                    edges.insert(w[3].text.clone());
                }
            }
        }
    }
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|m| known.contains(m));
    }
    graph
}

/// A circle in `graph`, as the path that closes it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The text without its `#[cfg(test)]` modules (blanked, so that line numbers hold).
fn product_text(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let next_is_mod = lines.get(i + 1).is_some_and(|l| {
            l.trim_start().starts_with("mod ") || l.trim_start().starts_with("pub mod ")
        });
        if lines[i].trim() == "#[cfg(test)]" && next_is_mod {
            let indent = &lines[i + 1][..lines[i + 1].len() - lines[i + 1].trim_start().len()];
            let end = if lines[i + 1].trim_end().ends_with(';') {
                i + 1
            } else {
                (i + 2..lines.len())
                    .find(|&j| lines[j] == format!("{indent}}}"))
                    .unwrap_or(lines.len() - 1)
            };
            out.extend(std::iter::repeat_n("", end + 1 - i));
            i = end + 1;
            continue;
        }
        out.push(lines[i]);
        i += 1;
    }
    out.join("\n")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ident,
    Keyword,
    Number,
    Str,
    Lifetime,
    Punct,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    text: String,
    line: usize,
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "Some", "None", "Ok", "Err",
];

/// Rust's tokens, roughly but enough for shapes: comments dropped, strings (raw, byte, C)
/// and chars as one token each, lifetimes told from chars.
fn lex(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let push =
        |out: &mut Vec<Token>, kind, text: String, line| out.push(Token { kind, text, line });
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += 2;
        } else if let Some(end) = string_end(&c, i) {
            push(&mut out, Kind::Str, String::new(), line);
            line += c[i..end].iter().filter(|&&x| x == '\n').count();
            i = end;
        } else if ch == '\'' {
            // A char ('x', '\n', '\u{..}') or a lifetime ('a).
            let escaped = c.get(i + 1) == Some(&'\\');
            let plain = c.get(i + 2) == Some(&'\'');
            if escaped || plain {
                let from = if escaped { i + 3 } else { i + 2 };
                let close = (from..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len());
                push(&mut out, Kind::Str, String::new(), line);
                i = close + 1;
            } else {
                let mut j = i + 1;
                while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
                    j += 1;
                }
                push(&mut out, Kind::Lifetime, String::new(), line);
                i = j;
            }
        } else if ch.is_ascii_digit() {
            let mut j = i;
            while j < c.len()
                && (c[j].is_alphanumeric()
                    || c[j] == '_'
                    || (c[j] == '.' && c.get(j + 1).is_some_and(char::is_ascii_digit)))
            {
                j += 1;
            }
            push(&mut out, Kind::Number, String::new(), line);
            i = j;
        } else if ch.is_alphabetic() || ch == '_' {
            let mut j = i;
            while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
                j += 1;
            }
            let word: String = c[i..j].iter().collect();
            let kind = if KEYWORDS.contains(&word.as_str()) {
                Kind::Keyword
            } else {
                Kind::Ident
            };
            push(&mut out, kind, word, line);
            i = j;
        } else {
            push(&mut out, Kind::Punct, ch.to_string(), line);
            i += 1;
        }
    }
    out
}

/// Where a string literal starting at `i` ends (one past its last char), if one starts
/// there: `"..."`, `b"..."`, `c"..."`, `r#"..."#`, `br"..."`.
fn string_end(c: &[char], i: usize) -> Option<usize> {
    let before_ident = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    if before_ident {
        return None;
    }
    let mut j = i;
    if matches!(c.get(j), Some('b') | Some('c')) {
        j += 1;
    }
    let raw = c.get(j) == Some(&'r');
    if raw {
        j += 1;
        let hashes = c[j..].iter().take_while(|&&x| x == '#').count();
        j += hashes;
        if c.get(j) != Some(&'"') {
            return None;
        }
        j += 1;
        while j < c.len() {
            if c[j] == '"'
                && c[j + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|&&x| x == '#')
                    .count()
                    == hashes
            {
                return Some(j + 1 + hashes);
            }
            j += 1;
        }
        return Some(c.len());
    }
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < c.len() && c[j] != '"' {
        j += if c[j] == '\\' { 2 } else { 1 };
    }
    Some((j + 1).min(c.len()))
}

/// A file's significant lines: (line number, shape). Imports, attributes, module
/// declarations and lines of punctuation alone are passed over.
fn shapes(text: &str) -> Vec<(usize, String)> {
    let mut by_line: BTreeMap<usize, Vec<Token>> = BTreeMap::new();
    for t in lex(&product_text(text)) {
        by_line.entry(t.line).or_default().push(t);
    }
    by_line
        .into_iter()
        .filter(|(_, toks)| !declaration(toks) && toks.iter().any(|t| t.kind != Kind::Punct))
        .map(|(n, toks)| {
            let shape: Vec<String> = toks
                .iter()
                .map(|t| match t.kind {
                    Kind::Ident => "i".into(),
                    Kind::Number => "0".into(),
                    Kind::Str => "\"\"".into(),
                    Kind::Lifetime => "'a".into(),
                    Kind::Keyword | Kind::Punct => t.text.clone(),
                })
                .collect();
            (n, shape.join(" "))
        })
        .collect()
}

/// Whether a line declares rather than does (passed over, as imports are): an import, an
/// attribute, a module, the head of an item (`fn`, `impl`, `struct`, `enum`, `trait`,
/// `type`), a field (`name: Type,`, also as a struct literal's `name: value,`). Signatures a
/// trait dictates and the fields of structs repeat without repeating logic.
fn declaration(toks: &[Token]) -> bool {
    let mut rest = toks;
    // `pub`, `pub(crate)`, `pub(super)`
    if rest.first().is_some_and(|t| t.text == "pub") {
        rest = &rest[1..];
        if rest.first().is_some_and(|t| t.text == "(") {
            let close = rest.iter().position(|t| t.text == ")").unwrap_or(0);
            rest = &rest[close + 1..];
        }
    }
    let Some(first) = rest.first() else {
        return true;
    };
    let heads = [
        "use", "mod", "fn", "impl", "struct", "enum", "trait", "type", "unsafe", "async", "extern",
        "const",
    ];
    if first.text == "#" || heads.contains(&first.text.as_str()) {
        return first.text != "const" || !rest.iter().any(|t| t.text == "=");
    }
    let field = first.kind == Kind::Ident
        && rest.get(1).is_some_and(|t| t.text == ":")
        && rest.get(2).is_none_or(|t| t.text != ":");
    field
        && !rest
            .iter()
            .any(|t| matches!(t.text.as_str(), "." | "!" | "=" | "?"))
}

/// Whether a block is more than boilerplate: lines of several shapes, with content (a run of
/// one shape, as a table or the fields of a struct, is not a repetition to fold).
fn rich(block: &[(usize, String)]) -> bool {
    let distinct: BTreeSet<&str> = block.iter().map(|(_, s)| s.as_str()).collect();
    let words: usize = block
        .iter()
        .map(|(_, s)| {
            s.split(' ')
                .filter(|t| t.chars().any(char::is_alphanumeric) || *t == "\"\"")
                .count()
        })
        .sum();
    distinct.len() >= 4 && words >= 18
}

/// The blocks of `BLOCK` significant lines of the same shape found in two places, as
/// `a.rs:FROM-TO ~ b.rs:FROM-TO`: each run of such blocks once.
fn repeated_blocks(files: &[PathBuf]) -> Vec<String> {
    let all: Vec<(PathBuf, Vec<(usize, String)>)> = files
        .iter()
        .map(|p| (p.clone(), shapes(&std::fs::read_to_string(p).unwrap())))
        .collect();
    // Where each block's shape was seen: (file, first line's index).
    let mut seen: HashMap<Vec<&str>, Vec<(usize, usize)>> = HashMap::new();
    // (file a, file b, the offset between them) → the first and last block of a run, each
    // as (index in a, index in b).
    type Blocks = ((usize, usize), (usize, usize));
    let mut runs: BTreeMap<(usize, usize, isize), Blocks> = BTreeMap::new();
    for (f, (_, lines)) in all.iter().enumerate() {
        for (k, block) in lines.windows(BLOCK).enumerate() {
            if !rich(block) {
                continue;
            }
            let key: Vec<&str> = block.iter().map(|(_, s)| s.as_str()).collect();
            let places = seen.entry(key).or_default();
            for &(g, j) in places.iter().filter(|&&(g, j)| g != f || j + BLOCK <= k) {
                let run = runs
                    .entry((g, f, k as isize - j as isize))
                    .or_insert(((j, k), (j, k)));
                run.1 = (j, k);
            }
            places.push((f, k));
        }
    }
    runs.into_iter()
        .map(|((g, f, _), ((j0, k0), (j1, k1)))| {
            let (a, b) = (&all[g], &all[f]);
            format!(
                "{}:{}-{} ~ {}:{}-{}",
                short(&a.0),
                a.1[j0].0,
                a.1[j1 + BLOCK - 1].0,
                short(&b.0),
                b.1[k0].0,
                b.1[k1 + BLOCK - 1].0
            )
        })
        .collect()
}

fn short(p: &Path) -> String {
    p.strip_prefix(crates_dir())
        .unwrap_or(p)
        .display()
        .to_string()
}
