//! Architecture checks (issue 35, items 4 and 5): crates in layers, modules without circles,
//! functions of at most [`MAX_FN_LINES`] lines. It reads the sources, it does not compile them.
//!
//! **Crate layers.** Every `deinsum*` dependency in a crate's Cargo.toml (normal, dev and build
//! sections) must point down the order of [`LAYERS`] (docs and /work/shared/DESIGN.md's crate
//! table); `deinsum-runtime` is the bottom and any crate may use it.
//!
//! **Module circles.** Per crate root (`src/lib.rs`, `src/main.rs`, python's `src/lib.rs`) the
//! module tree is followed through `mod x;` declarations, and an edge `a -> b` is recorded when
//! module `a` names an item of module `b` through a `use` path or a path in code (`crate::b::f`,
//! `super::b::T`, `b::f` for a child `b`). The rules, chosen so an edge means "a needs b":
//! - A parent declaring a child (`mod b;`) is not an import; a parent using a child's items is.
//! - `super::` is an import like any other: a child using its parent's items (`use super::T`)
//!   depends on the parent. So a parent and a child that use each other's items form a circle.
//! - A path is resolved to the module that defines the item: through `use` bindings and
//!   re-exports (`pub use inner::T` in lib.rs sends `crate::T` to `inner`), then globs.
//! - A re-export (`pub use`, `pub(crate) use`) routes a name and is not an import of its own:
//!   a facade lib.rs that declares modules and re-exports their items depends on nothing.
//! - Test code (`#[cfg(test)]` items and the module files they declare) is left out: tests of a
//!   module sit below it by construction and are not part of the shipped layering.
//! - Inline modules other than tests (`mod p2p { .. }`) are folded into their file's module.
//!
//! A circle is a strongly connected component of that graph; the test prints each with one
//! loop through it and the file:line of every import on the loop.
//!
//! **Long functions.** A function is counted from its `fn` line to the closing brace at the
//! same indent, in every `crates/*/src/**/*.rs` file.
//!
//! Both checks carry an allowlist of today's offenders (TODO issue 35: empty them). The lists can
//! only shrink: an offender not listed fails, and so does an entry that is no longer an offender.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a function in `crates/*/src` may be, in lines.
const MAX_FN_LINES: usize = 120;

/// Crates bottom to top; a crate may depend only on crates before it (runtime on none).
const LAYERS: &[&str] = &[
    "deinsum-runtime",
    "deinsum-expr",
    "deinsum-path",
    "deinsum-soap",
    "deinsum-plan",
    "deinsum-exec",
    "deinsum-sparse",
    "deinsum-join",
    "deinsum",
    "deinsum-python",
];

/// Module circles that exist today, each as `crate: module, module, ...` (sorted), exactly as
/// the test prints them. TODO issue 35: the helpers restructuring exec and the CLI empty this.
const CYCLE_ALLOWLIST: &[&str] = &[
    // TODO(issue 35): python, lib.rs and its MPI path share helpers both ways.
    "deinsum-python: deinsum-python, deinsum-python::mpi_run, deinsum-python::sparse",
    // TODO(issue 35): cli html <-> plan.
    "deinsum: deinsum::cli::html, deinsum::cli::html::plan_view, deinsum::cli::plan",
    // TODO(issue 36): the session's state, its arrays and its runs refer to each other.
    "deinsum: deinsum::session, deinsum::session::array, deinsum::session::run",
    // TODO(issue 35): cli run <-> sparse.
    "deinsum: deinsum::cli::run, deinsum::cli::sparse, deinsum::cli::sparse_inputs",
];

/// Functions over [`MAX_FN_LINES`] today, as (`file::name`, lines now): one may shrink but not
/// grow. TODO issue 35: split each and drop its entry.
const LONG_FN_ALLOWLIST: &[(&str, usize)] = &[];

// ---------------------------------------------------------------------------------------------
// Tokens

/// A token of Rust source, comments and literals dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Index just past the string literal whose opening quote is at `i` (escapes honoured).
fn skip_string(s: &[char], mut i: usize, line: &mut usize) -> usize {
    i += 1;
    while i < s.len() && s[i] != '"' {
        if s[i] == '\\' {
            i += 1;
        }
        if i < s.len() && s[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    i + 1
}

/// Index just past the raw string whose `#`s or quote start at `i`.
fn skip_raw_string(s: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut hashes = 0;
    while s[i] == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1;
    loop {
        if i >= s.len() {
            return i;
        }
        if s[i] == '\n' {
            *line += 1;
        }
        if s[i] == '"' && (1..=hashes).all(|k| s.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
}

/// Index just past a block comment opened at `i` (nested comments honoured).
fn skip_block_comment(s: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    while i < s.len() {
        if s[i] == '/' && s.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            if s[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// Index just past a char literal or lifetime starting at the quote `i`.
fn skip_quote(s: &[char], i: usize) -> usize {
    if s.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        while j < s.len() && s[j] != '\'' {
            j += 1;
        }
        j + 1
    } else if s.get(i + 2) == Some(&'\'') {
        i + 3
    } else {
        let mut j = i + 1;
        while j < s.len() && is_ident_char(s[j]) {
            j += 1;
        }
        j
    }
}

/// Reads an identifier at `i`; literal prefixes (`b"`, `r#"`, `br"`, `b'`) and raw identifiers
/// are handled here. Returns the next index and the identifier if the text was one.
fn lex_word(s: &[char], i: usize, line: &mut usize) -> (usize, Option<String>) {
    let mut j = i;
    while j < s.len() && is_ident_char(s[j]) {
        j += 1;
    }
    let word: String = s[i..j].iter().collect();
    let next = s.get(j).copied();
    match (word.as_str(), next) {
        ("b", Some('"')) => (skip_string(s, j, line), None),
        ("b", Some('\'')) => (skip_quote(s, j), None),
        ("r" | "br", Some('"')) => (skip_raw_string(s, j, line), None),
        ("r" | "br", Some('#')) if s.get(j + 1).is_some_and(|&c| c == '#' || c == '"') => {
            (skip_raw_string(s, j, line), None)
        }
        ("r", Some('#')) => {
            let mut k = j + 1;
            while k < s.len() && is_ident_char(s[k]) {
                k += 1;
            }
            (k, Some(s[j + 1..k].iter().collect()))
        }
        _ if word.starts_with(|c: char| c.is_ascii_digit()) => (j, None),
        _ => (j, Some(word)),
    }
}

/// Splits Rust source into identifiers, `::` and punctuation, with line numbers.
fn tokenize(src: &str) -> Vec<Token> {
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && s.get(i + 1) == Some(&'/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && s.get(i + 1) == Some(&'*') {
            i = skip_block_comment(&s, i, &mut line);
        } else if c == '"' {
            i = skip_string(&s, i, &mut line);
        } else if c == '\'' {
            i = skip_quote(&s, i);
        } else if is_ident_start(c) || c.is_ascii_digit() {
            let start_line = line;
            let (next, word) = lex_word(&s, i, &mut line);
            if let Some(w) = word {
                out.push(Token {
                    tok: Tok::Ident(w),
                    line: start_line,
                });
            }
            i = next;
        } else if c == ':' && s.get(i + 1) == Some(&':') {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

fn ident(t: &Token) -> Option<&str> {
    match &t.tok {
        Tok::Ident(s) => Some(s),
        _ => None,
    }
}

fn is_punct(t: Option<&Token>, c: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
}

/// Index of the bracket that closes the one opened at `open`.
fn matching(toks: &[Token], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

/// Index just past the item starting at `i` (after its attributes): a `use`, `const` or `static`
/// ends at `;`; anything else at its first `;` or `{...}` at depth 0.
fn item_end(toks: &[Token], mut i: usize) -> usize {
    let to_semicolon = toks[i..]
        .iter()
        .take(4)
        .any(|t| matches!(ident(t), Some("use" | "const" | "static")))
        && !toks[i..].iter().take(4).any(|t| ident(t) == Some("fn"));
    while i < toks.len() {
        match toks[i].tok {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') if !to_semicolon => return matching(toks, i) + 1,
            Tok::Punct('(' | '[' | '{') => i = matching(toks, i) + 1,
            _ => i += 1,
        }
    }
    i
}

/// Whether the attribute `#[...]` at `i` is `cfg(test)` or `cfg(all(test, ..))`.
fn is_cfg_test(toks: &[Token], i: usize) -> bool {
    let word = |k: usize| toks.get(i + 2 + k).and_then(ident).unwrap_or("");
    word(0) == "cfg" && (word(2) == "test" || word(2) == "all" && word(4) == "test")
}

/// The tokens without `#[cfg(test)]` items.
fn drop_test_items(toks: Vec<Token>) -> Vec<Token> {
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if is_punct(toks.get(i), '#') && is_punct(toks.get(i + 1), '[') && is_cfg_test(&toks, i) {
            let mut j = matching(&toks, i + 1) + 1;
            while is_punct(toks.get(j), '#') && is_punct(toks.get(j + 1), '[') {
                j = matching(&toks, j + 1) + 1;
            }
            i = item_end(&toks, j);
        } else {
            out.push(toks[i].clone());
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Modules

/// A `use` binding: `bind` names `path` in its module (`None`: a glob).
#[derive(Debug)]
struct Use {
    path: Vec<String>,
    bind: Option<String>,
    line: usize,
    /// `pub use` (any visibility): routes a name, is not itself an import.
    reexport: bool,
}

/// One module file, read.
#[derive(Debug, Default)]
struct Module {
    /// Path from the crate root (`[]` for the root).
    path: Vec<String>,
    file: String,
    parent: Option<usize>,
    /// Children declared with `mod x;`.
    children: BTreeMap<String, usize>,
    /// Inline modules (`mod x { .. }`), folded into this one.
    inline: BTreeSet<String>,
    /// Names of items defined here.
    defs: BTreeSet<String>,
    uses: Vec<Use>,
    /// Paths used in code (`crate::x::f`, `child::T`), with their line.
    refs: Vec<(Vec<String>, usize)>,
}

/// Parses the use tree starting at `i` under `prefix`, pushing its bindings; returns the index
/// just past it.
fn parse_use_tree(toks: &[Token], mut i: usize, prefix: &[String], out: &mut Vec<Use>) -> usize {
    let mut path = prefix.to_vec();
    let line = toks.get(i).map_or(0, |t| t.line);
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Sep) => i += 1,
            Some(Tok::Punct('*')) => {
                out.push(Use {
                    path,
                    bind: None,
                    line,
                    reexport: false,
                });
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                let close = matching(toks, i);
                i += 1;
                while i < close {
                    i = parse_use_tree(toks, i, &path, out);
                    if is_punct(toks.get(i), ',') {
                        i += 1;
                    }
                }
                return close + 1;
            }
            Some(Tok::Ident(w)) if w == "as" => {
                let alias = ident(&toks[i + 1]).unwrap_or("_").to_string();
                out.push(Use {
                    path,
                    bind: Some(alias),
                    line,
                    reexport: false,
                });
                return i + 2;
            }
            Some(Tok::Ident(w)) => {
                path.push(w.clone());
                i += 1;
            }
            _ => break,
        }
    }
    if path.last().map(String::as_str) == Some("self") {
        path.pop();
    }
    if let Some(last) = path.last().cloned() {
        if path.len() > prefix.len() || !prefix.is_empty() {
            out.push(Use {
                path,
                bind: Some(last),
                line,
                reexport: false,
            });
        }
    }
    i
}

/// Whether the item keyword at `i` carries a visibility (`pub`, `pub(crate)`, ...).
fn is_visible(toks: &[Token], i: usize) -> bool {
    if i == 0 {
        return false;
    }
    if is_punct(toks.get(i - 1), ')') {
        let open = (0..i - 1).rev().find(|&k| is_punct(toks.get(k), '('));
        return open.is_some_and(|k| k > 0 && ident(&toks[k - 1]) == Some("pub"));
    }
    ident(&toks[i - 1]) == Some("pub")
}

/// Rewrites up to `depth` leading `super`s (inline modules folded into their file) as `self`.
fn unfold(path: &mut Vec<String>, depth: usize) {
    let supers = path.iter().take_while(|w| *w == "super").count().min(depth);
    if supers > 0 {
        path.drain(..supers);
        path.insert(0, "self".to_string());
    }
}

const DEF_KEYWORDS: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "union",
    "mod",
    "macro_rules",
];

/// Reads a module's tokens: children, inline modules, definitions, uses and paths.
fn read_module(toks: &[Token], m: &mut Module) -> Vec<String> {
    let mut file_children = Vec::new();
    // Where each enclosing inline module's body closes: its `super::` is this file's `self::`.
    let mut inline_ends: Vec<usize> = vec![];
    let mut i = 0;
    while i < toks.len() {
        while inline_ends.last().is_some_and(|&end| end < i) {
            inline_ends.pop();
        }
        let depth = inline_ends.len();
        let word = ident(&toks[i]);
        let prev_sep = i > 0 && toks[i - 1].tok == Tok::Sep;
        let next = toks.get(i + 1);
        match word {
            Some("use") if !prev_sep => {
                let start = if next.map(|t| &t.tok) == Some(&Tok::Sep) {
                    i + 2
                } else {
                    i + 1
                };
                // A leading `::` names an external crate.
                if start == i + 1 {
                    let first = m.uses.len();
                    parse_use_tree(toks, start, &[], &mut m.uses);
                    let reexport = is_visible(toks, i);
                    for u in &mut m.uses[first..] {
                        u.reexport = reexport;
                        unfold(&mut u.path, depth);
                    }
                }
                i = item_end(toks, i);
                continue;
            }
            Some("mod") if next.and_then(ident).is_some() => {
                let name = ident(next.unwrap()).unwrap().to_string();
                if is_punct(toks.get(i + 2), ';') {
                    file_children.push(name);
                } else {
                    m.inline.insert(name);
                    if is_punct(toks.get(i + 2), '{') {
                        inline_ends.push(matching(toks, i + 2));
                    }
                }
            }
            Some(w) if DEF_KEYWORDS.contains(&w) => {
                let k = if w == "macro_rules" { i + 2 } else { i + 1 };
                if let Some(name) = toks.get(k).and_then(ident) {
                    m.defs.insert(name.to_string());
                }
            }
            Some(_) if !prev_sep && next.map(|t| &t.tok) == Some(&Tok::Sep) => {
                let mut path = vec![];
                let mut j = i;
                while let Some(w) = toks.get(j).and_then(ident) {
                    path.push(w.to_string());
                    if toks.get(j + 1).map(|t| &t.tok) != Some(&Tok::Sep) {
                        break;
                    }
                    j += 2;
                }
                unfold(&mut path, depth);
                m.refs.push((path, toks[i].line));
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    file_children
}

/// A crate's sources: file path (relative, `/`-separated) to text.
type Files = BTreeMap<String, String>;

/// The file of child `name` of the module in `file`, if present.
fn child_file(files: &Files, file: &str, name: &str) -> Option<String> {
    let (dir, stem) = match file.rsplit_once('/') {
        Some((d, f)) => (d.to_string(), f.trim_end_matches(".rs").to_string()),
        None => (String::new(), file.trim_end_matches(".rs").to_string()),
    };
    let base = if matches!(stem.as_str(), "lib" | "main" | "mod") {
        dir
    } else if dir.is_empty() {
        stem
    } else {
        format!("{dir}/{stem}")
    };
    let join = |p: String| {
        if base.is_empty() {
            p
        } else {
            format!("{base}/{p}")
        }
    };
    [join(format!("{name}.rs")), join(format!("{name}/mod.rs"))]
        .into_iter()
        .find(|f| files.contains_key(f))
}

/// Reads the module tree of the crate rooted at `root`.
fn read_crate(files: &Files, root: &str) -> Vec<Module> {
    let mut mods = vec![Module {
        file: root.to_string(),
        ..Module::default()
    }];
    let mut k = 0;
    while k < mods.len() {
        let toks = drop_test_items(tokenize(&files[&mods[k].file]));
        let children = read_module(&toks, &mut mods[k]);
        for name in children {
            let Some(file) = child_file(files, &mods[k].file, &name) else {
                continue;
            };
            let mut path = mods[k].path.clone();
            path.push(name.clone());
            let id = mods.len();
            mods.push(Module {
                path,
                file,
                parent: Some(k),
                ..Module::default()
            });
            mods[k].children.insert(name, id);
        }
        k += 1;
    }
    mods
}

/// The module that `path`, written in module `at`, names (the item's defining module); `None` for
/// paths outside the crate or to local items.
fn resolve(mods: &[Module], at: usize, path: &[String], depth: usize) -> Option<usize> {
    if depth > 16 || path.is_empty() {
        return None;
    }
    let (mut cur, rest) = match path[0].as_str() {
        "crate" => (0, &path[1..]),
        "self" => (at, &path[1..]),
        "super" => (mods[at].parent?, &path[1..]),
        first => {
            if let Some(&c) = mods[at].children.get(first) {
                (c, &path[1..])
            } else if let Some(u) = mods[at]
                .uses
                .iter()
                .find(|u| u.bind.as_deref() == Some(first))
            {
                let mut p = u.path.clone();
                p.extend_from_slice(&path[1..]);
                return resolve(mods, at, &p, depth + 1);
            } else {
                return None;
            }
        }
    };
    let mut rest = rest;
    while let Some(name) = rest.first() {
        let m = &mods[cur];
        if name == "super" {
            cur = m.parent?;
        } else if name == "self" || m.inline.contains(name) {
        } else if let Some(&c) = m.children.get(name) {
            cur = c;
        } else if m.defs.contains(name) {
            return Some(cur);
        } else if let Some(u) = m.uses.iter().find(|u| u.bind.as_deref() == Some(name)) {
            let mut p = u.path.clone();
            p.extend_from_slice(&rest[1..]);
            // A binding to another crate's item is no edge inside this one.
            return resolve(mods, cur, &p, depth + 1);
        } else {
            for g in m.uses.iter().filter(|u| u.bind.is_none()) {
                let mut p = g.path.clone();
                p.extend_from_slice(rest);
                if let Some(t) = resolve(mods, cur, &p, depth + 1) {
                    if t != cur
                        && (mods[t].defs.contains(name) || mods[t].children.contains_key(name))
                    {
                        return Some(t);
                    }
                }
            }
            return Some(cur);
        }
        rest = &rest[1..];
    }
    Some(cur)
}

/// A crate's module graph: names and edges `a -> b` with the first file:line that makes each.
struct Graph {
    names: Vec<String>,
    edges: BTreeMap<(usize, usize), String>,
}

/// Builds the module graph of the crate `name` rooted at `root` in `files`.
fn module_graph(name: &str, files: &Files, root: &str) -> Graph {
    let mods = read_crate(files, root);
    let mut edges = BTreeMap::new();
    for (a, m) in mods.iter().enumerate() {
        let imports = m.uses.iter().filter(|u| !u.reexport);
        let paths = imports
            .map(|u| (&u.path, u.line))
            .chain(m.refs.iter().map(|(p, l)| (p, *l)));
        for (p, line) in paths {
            // A path in code that starts with a plain name names a child, a use binding, or
            // something outside the crate; `resolve` tells which.
            if let Some(b) = resolve(&mods, a, p, 0) {
                if b != a {
                    edges
                        .entry((a, b))
                        .or_insert_with(|| format!("{}:{line}", m.file));
                }
            }
        }
    }
    let names = mods
        .iter()
        .map(|m| {
            std::iter::once(name.to_string())
                .chain(m.path.iter().cloned())
                .collect::<Vec<_>>()
                .join("::")
        })
        .collect();
    Graph { names, edges }
}

/// Strongly connected components of more than one module (Tarjan), each sorted.
fn components(n: usize, edges: &BTreeMap<(usize, usize), String>) -> Vec<Vec<usize>> {
    let mut adj = vec![vec![]; n];
    for &(a, b) in edges.keys() {
        adj[a].push(b);
    }
    struct St {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, adj: &[Vec<usize>], st: &mut St) {
        st.index[v] = Some(st.next);
        st.low[v] = st.next;
        st.next += 1;
        st.stack.push(v);
        st.on[v] = true;
        for &w in &adj[v] {
            match st.index[w] {
                None => {
                    visit(w, adj, st);
                    st.low[v] = st.low[v].min(st.low[w]);
                }
                Some(iw) if st.on[w] => st.low[v] = st.low[v].min(iw),
                _ => {}
            }
        }
        if Some(st.low[v]) == st.index[v] {
            let mut comp = vec![];
            while let Some(w) = st.stack.pop() {
                st.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort_unstable();
                st.out.push(comp);
            }
        }
    }
    let mut st = St {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: vec![],
        next: 0,
        out: vec![],
    };
    for v in 0..n {
        if st.index[v].is_none() {
            visit(v, &adj, &mut st);
        }
    }
    st.out.sort();
    st.out
}

/// A shortest loop from the first module of `comp` back to itself, inside `comp`.
fn one_loop(comp: &[usize], edges: &BTreeMap<(usize, usize), String>) -> Vec<usize> {
    let start = comp[0];
    let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for (&(a, b), _) in edges.range((v, 0)..(v + 1, 0)) {
            debug_assert_eq!(a, v);
            if !comp.contains(&b) || prev.contains_key(&b) {
                continue;
            }
            prev.insert(b, v);
            if b == start {
                let mut path = vec![start];
                let mut x = v;
                while x != start {
                    path.push(x);
                    x = prev[&x];
                }
                path.push(start);
                path.reverse();
                return path;
            }
            queue.push_back(b);
        }
    }
    comp.to_vec()
}

/// A module circle: its key (`crate: a, b`) and a printed loop with the imports that make it.
struct Circle {
    key: String,
    detail: String,
}

/// The module circles of one crate.
fn circles(name: &str, files: &Files, root: &str) -> Vec<Circle> {
    let g = module_graph(name, files, root);
    components(g.names.len(), &g.edges)
        .into_iter()
        .map(|comp| {
            let mut members: Vec<&str> = comp.iter().map(|&v| g.names[v].as_str()).collect();
            members.sort_unstable();
            let key = format!("{name}: {}", members.join(", "));
            let mut detail = format!("circle {key}\n");
            for w in one_loop(&comp, &g.edges).windows(2) {
                let at = g.edges.get(&(w[0], w[1])).map_or("?", String::as_str);
                let _ = writeln!(
                    detail,
                    "    {} -> {}   ({at})",
                    g.names[w[0]], g.names[w[1]]
                );
            }
            Circle { key, detail }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Crate layers

/// The `deinsum*` dependencies of a Cargo.toml, from every dependency section.
fn deinsum_deps(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut out = vec![];
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line
                .trim_matches(|c| c == '[' || c == ']')
                .ends_with("dependencies");
        } else if in_deps {
            let key = line
                .split(['=', '.'])
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches('"');
            if key == "deinsum" || key.starts_with("deinsum-") {
                out.push(key.to_string());
            }
        }
    }
    out
}

/// The package name of a Cargo.toml.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_pkg = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_pkg = line == "[package]";
        } else if in_pkg && line.starts_with("name") {
            return line
                .split('=')
                .nth(1)
                .map(|v| v.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// The arrows of `crate_name`'s manifest that do not point down [`LAYERS`].
fn upward_arrows(crate_name: &str, manifest: &str) -> Vec<String> {
    let layer = |n: &str| LAYERS.iter().position(|&l| l == n);
    let Some(me) = layer(crate_name) else {
        return vec![format!(
            "{crate_name} is not in LAYERS: place it in the order"
        )];
    };
    deinsum_deps(manifest)
        .into_iter()
        .filter_map(|dep| match layer(&dep) {
            None => Some(format!("{crate_name} -> {dep}: {dep} is not in LAYERS")),
            Some(0) if me > 0 => None,
            Some(d) if d < me => None,
            Some(_) => Some(format!(
                "{crate_name} -> {dep} points up (layers: {})",
                LAYERS.join(" < ")
            )),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Long functions

/// The name on a line that starts a function item (after visibility and qualifiers).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("pub(") {
            rest = r.split_once(')')?.1.trim_start();
            continue;
        }
        let word = rest.split_whitespace().next()?;
        match word {
            "pub" | "const" | "async" | "unsafe" | "default" | "extern" | "\"C\"" => {
                rest = rest[word.len()..].trim_start();
            }
            "fn" => {
                let r = rest[2..].trim_start();
                let end = r.find(|c: char| !is_ident_char(c)).unwrap_or(r.len());
                return (end > 0).then(|| &r[..end]);
            }
            _ => return None,
        }
    }
}

/// Functions of `text` longer than [`MAX_FN_LINES`]: (name, first line, lines).
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = vec![];
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let indent = &line[..line.len() - line.trim_start().len()];
        // The signature ends at the first `{` (a body) or `;` (a declaration).
        let Some(open) = (start..lines.len())
            .find(|&k| lines[k].contains('{') || lines[k].trim_end().ends_with(';'))
        else {
            continue;
        };
        if !lines[open].contains('{') || lines[open].trim_end().ends_with('}') && open == start {
            continue;
        }
        let close = (open..lines.len()).find(|&k| lines[k].trim_end() == format!("{indent}}}"));
        if let Some(close) = close {
            let len = close - start + 1;
            if len > MAX_FN_LINES {
                out.push((name.to_string(), start + 1, len));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The workspace

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Every `.rs` file under `dir`, keyed by its path relative to `base`.
fn rust_files(base: &Path, dir: &Path, out: &mut Files) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(base, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(rel, fs::read_to_string(&p).unwrap());
        }
    }
}

/// The crate folders: `crates/*` and `python`, with their package names.
fn crate_dirs() -> Vec<(String, PathBuf)> {
    let ws = workspace();
    let mut dirs: Vec<PathBuf> = fs::read_dir(ws.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.push(ws.join("python"));
    dirs.into_iter()
        .filter_map(|d| {
            let manifest = fs::read_to_string(d.join("Cargo.toml")).ok()?;
            Some((package_name(&manifest)?, d))
        })
        .collect()
}

/// Every module circle in the workspace's crates (each crate root on its own).
fn workspace_circles() -> Vec<Circle> {
    let mut out = vec![];
    for (name, dir) in crate_dirs() {
        let mut files = Files::new();
        rust_files(&dir, &dir.join("src"), &mut files);
        for root in ["src/lib.rs", "src/main.rs"] {
            if files.contains_key(root) {
                let label = if root.ends_with("main.rs") {
                    format!("{name}(bin)")
                } else {
                    name.clone()
                };
                out.extend(circles(&label, &files, root));
            }
        }
    }
    out
}

/// Compares what was found with an allowlist that may only shrink.
fn shrink_only(found: &BTreeSet<String>, allowed: &BTreeSet<String>, what: &str) -> Vec<String> {
    let mut errors = vec![];
    for f in found.difference(allowed) {
        errors.push(format!("new {what} (not in the allowlist): {f}"));
    }
    for a in allowed.difference(found) {
        errors.push(format!(
            "allowlisted {what} no longer exists, remove its entry: {a}"
        ));
    }
    errors
}

#[test]
fn no_module_circles_beyond_the_allowlist() {
    let circles = workspace_circles();
    for c in &circles {
        println!("{}", c.detail);
    }
    let found: BTreeSet<String> = circles.iter().map(|c| c.key.clone()).collect();
    let allowed: BTreeSet<String> = CYCLE_ALLOWLIST.iter().map(|s| s.to_string()).collect();
    let errors = shrink_only(&found, &allowed, "module circle");
    assert!(
        errors.is_empty(),
        "{}\ncircles now (exact allowlist form):\n{}",
        errors.join("\n"),
        found
            .iter()
            .map(|k| format!("    {k:?},"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn crate_arrows_point_down() {
    let mut errors = vec![];
    for (name, dir) in crate_dirs() {
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        errors.extend(upward_arrows(&name, &manifest));
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn no_function_over_the_limit_beyond_the_allowlist() {
    let ws = workspace();
    let mut files = Files::new();
    rust_files(&ws, &ws.join("crates"), &mut files);
    let mut found = BTreeMap::new();
    for (file, text) in files.iter().filter(|(f, _)| f.contains("/src/")) {
        for (name, line, len) in long_functions(text) {
            println!("{file}:{line} {name}: {len} lines");
            let e = found.entry(format!("{file}::{name}")).or_insert(0);
            *e = len.max(*e);
        }
    }
    let allowed: BTreeMap<String, usize> = LONG_FN_ALLOWLIST
        .iter()
        .map(|&(k, n)| (k.to_string(), n))
        .collect();
    let keys = |m: &BTreeMap<String, usize>| m.keys().cloned().collect::<BTreeSet<_>>();
    let mut errors = shrink_only(&keys(&found), &keys(&allowed), "function over the limit");
    for (k, &n) in &found {
        if allowed.get(k).is_some_and(|&max| n > max) {
            errors.push(format!(
                "{k} grew to {n} lines (allowlisted at {})",
                allowed[k]
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "{}\nnow: {:?}",
        errors.join("\n"),
        found
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// The checker on small inputs

fn files(list: &[(&str, &str)]) -> Files {
    list.iter()
        .map(|&(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn a_circle_through_three_modules_is_found_and_named() {
    let f = files(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "pub struct B;\nfn f() { crate::c::g(); }\n"),
        ("src/c.rs", "pub fn g() {}\nuse super::a::A;\n"),
    ]);
    let found = circles("k", &f, "src/lib.rs");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key, "k: k::a, k::b, k::c");
    assert!(
        found[0].detail.contains("k::a -> k::b   (src/a.rs:1)"),
        "{}",
        found[0].detail
    );
    assert!(
        found[0].detail.contains("k::c -> k::a   (src/c.rs:2)"),
        "{}",
        found[0].detail
    );
}

#[test]
fn a_chain_is_not_a_circle() {
    let f = files(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "pub struct B;\nfn f() { super::c::g(); }\n"),
        // Comments, strings and tests name modules without importing them.
        ("src/c.rs", "pub fn g() {} // crate::a::A\nconst S: &str = \"crate::a::A\";\n#[cfg(test)]\nmod tests { use crate::a::A; }\n"),
    ]);
    assert!(circles("k", &f, "src/lib.rs").is_empty());
}

#[test]
fn a_child_using_its_parent_that_uses_it_is_a_circle_but_a_declaration_is_not() {
    let declared = files(&[
        ("src/lib.rs", "mod p;\n"),
        ("src/p/mod.rs", "mod q;\npub struct T;\n"),
        ("src/p/q.rs", "use super::T;\n"),
    ]);
    assert!(circles("k", &declared, "src/lib.rs").is_empty());
    let both = files(&[
        ("src/lib.rs", "mod p;\n"),
        ("src/p/mod.rs", "mod q;\npub struct T;\nfn f() { q::g() }\n"),
        ("src/p/q.rs", "use super::T;\npub fn g() {}\n"),
    ]);
    assert_eq!(circles("k", &both, "src/lib.rs")[0].key, "k: k::p, k::p::q");
}

#[test]
fn super_inside_an_inline_module_is_its_own_file() {
    let f = files(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "pub struct A;\npub(crate) mod inner { use super::A; }\nfn f() { crate::b::g() }\n",
        ),
        ("src/b.rs", "pub fn g() { crate::a::inner::h() }\n"),
    ]);
    // b -> a through the inline module, and a's inline `super` is a itself, not the root.
    assert_eq!(circles("k", &f, "src/lib.rs")[0].key, "k: k::a, k::b");
    let g = module_graph("k", &f, "src/lib.rs");
    assert!(!g.edges.contains_key(&(1, 0)), "{:?}", g.edges);
}

#[test]
fn a_re_export_at_the_root_sends_the_edge_to_the_defining_module() {
    let f = files(&[
        (
            "src/lib.rs",
            "mod a;\nmod b;\npub use a::A;\npub use b::*;\n",
        ),
        ("src/a.rs", "use crate::B;\npub struct A;\n"),
        ("src/b.rs", "pub struct B;\nfn f(_: crate::A) {}\n"),
    ]);
    assert_eq!(circles("k", &f, "src/lib.rs")[0].key, "k: k::a, k::b");
}

#[test]
fn an_upward_crate_arrow_is_found() {
    let manifest = "[package]\nname = \"deinsum-plan\"\n[dependencies]\ndeinsum-expr.workspace = true\ndeinsum-exec = { path = \"../exec\" }\n[dev-dependencies]\ndeinsum-runtime.workspace = true\n";
    assert_eq!(package_name(manifest).as_deref(), Some("deinsum-plan"));
    let up = upward_arrows("deinsum-plan", manifest);
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(up[0].starts_with("deinsum-plan -> deinsum-exec points up"));
    assert_eq!(
        upward_arrows("deinsum-runtime", "[dependencies]\ndeinsum-expr = \"1\"\n").len(),
        1
    );
    assert!(upward_arrows(
        "deinsum-exec",
        "[dependencies]\ndeinsum-runtime.workspace = true\n"
    )
    .is_empty());
}

#[test]
fn a_long_function_is_counted_from_fn_to_its_closing_brace() {
    let body = "    x += 1;\n".repeat(MAX_FN_LINES - 2);
    let ok = format!("pub(crate) fn fits(x: &mut u8) {{\n{body}}}\n");
    assert!(long_functions(&ok).is_empty());
    let long = format!("impl S {{\n    pub fn over(\n        x: &mut u8,\n    ) {{\n{body}    }}\n    fn decl();\n}}\n");
    assert_eq!(
        long_functions(&long),
        vec![("over".to_string(), 2, MAX_FN_LINES + 2)]
    );
}

#[test]
fn an_allowlist_only_shrinks() {
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert!(shrink_only(&set(&["a"]), &set(&["a"]), "x").is_empty());
    assert_eq!(
        shrink_only(&set(&["a", "b"]), &set(&["a"]), "x"),
        vec!["new x (not in the allowlist): b"]
    );
    assert_eq!(
        shrink_only(&set(&[]), &set(&["a"]), "x"),
        vec!["allowlisted x no longer exists, remove its entry: a"]
    );
}

#[test]
#[ignore]
fn print_edges() {
    let name = std::env::var("ARCH_CRATE").unwrap();
    let dir = workspace().join("crates").join(&name);
    let mut f = Files::new();
    rust_files(&dir, &dir.join("src"), &mut f);
    let g = module_graph(&name, &f, "src/lib.rs");
    for ((a, b), at) in &g.edges {
        println!("EDGE {} -> {} ({at})", g.names[*a], g.names[*b]);
    }
}
