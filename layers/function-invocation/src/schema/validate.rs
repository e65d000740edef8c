//! Walking an instance through the compiled tree. One walk serves both questions: "is it valid?" (quiet: stops
//! at the first failure, builds no paths or messages) and "what is wrong?" (collecting: every violation, each
//! with the instance path where it was found).
//!
//! Two things keep a hostile schema from costing more than its size. A subschema that in-place applicators
//! reach from two places ([`Tree::shared`]) has its result remembered per value, so levels of
//! `allOf: [{$ref}, {$ref}]` are checked once per level, not 2^levels times; the walks of one validation (the
//! quiet checks inside `anyOf`, the forks that explain a failed `anyOf`) share what was remembered. And the walk
//! recurses at most [`MAX_CHECK_DEPTH`] schemas deep, so no value and schema together can exhaust a thread's
//! stack: a deeper walk is a violation saying so.

use std::collections::HashMap;
use std::fmt::Write;

use serde_json::Value;

use super::compile::{Bound, Check, Node, NodeId, Tree, Types};
use super::value::{
    compare_numbers, cut, cut_at, is_integer, is_multiple_of, json_equal, show, type_name,
};
use super::Violation;

/// A step of the instance path.
#[derive(Clone, Copy, Debug)]
enum Segment<'v> {
    Key(&'v str),
    Index(usize),
}

/// How many schemas deep one walk may recurse (each `$ref`, applicator, property or item is one). The deepest
/// legitimate walk is a value nested as deep as `serde_json` parses (128) through a few schemas per level; the
/// stack this takes stays far below the smallest thread stack a server gives its workers.
pub(crate) const MAX_CHECK_DEPTH: usize = 1024;

/// The longest reason given for one alternative of a failed `anyOf`/`oneOf`.
const SHOWN_REASON_CHARS: usize = 240;

/// What one validation remembers of the shared subschemas, keyed by (node, address of the value).
#[derive(Default)]
struct Memo {
    seen: HashMap<(NodeId, usize), Seen>,
    /// Walks handed out so far: each collecting walk has its own number.
    walks: u32,
    /// Schemas checked against a value so far, by every walk sharing this memory (what the tests bound).
    checks: u64,
}

/// One shared subschema checked against one value.
struct Seen {
    valid: bool,
    /// Its first violation, once a collecting walk checked it.
    first: Option<Violation>,
    /// The collecting walk whose violations already say what is wrong here (0: none).
    reported_by: u32,
}

/// The state of one walk.
pub(crate) struct Walk<'v> {
    collect: bool,
    path: Vec<Segment<'v>>,
    found: Vec<Violation>,
    /// This walk's number, when it collects.
    id: u32,
    /// How many schemas deep the walk is.
    depth: usize,
    memo: Memo,
}

impl<'v> Walk<'v> {
    /// A walk that only answers valid or not.
    pub(crate) fn quiet() -> Self {
        Walk {
            collect: false,
            path: Vec::new(),
            found: Vec::new(),
            id: 0,
            depth: 0,
            memo: Memo::default(),
        }
    }

    /// A walk that records every violation.
    pub(crate) fn collecting() -> Self {
        let mut walk = Walk::quiet();
        walk.collect = true;
        walk.memo.walks = 1;
        walk.id = 1;
        walk
    }

    /// A walk starting at the same place as this one, sharing what it remembers (give it back with
    /// [`Walk::rejoin`]): a collecting one with a number of its own, or a quiet one.
    fn branch(&mut self, collect: bool) -> Self {
        let mut memo = std::mem::take(&mut self.memo);
        let id = if collect {
            memo.walks += 1;
            memo.walks
        } else {
            0
        };
        Walk {
            collect,
            path: if collect {
                self.path.clone()
            } else {
                Vec::new()
            },
            found: Vec::new(),
            id,
            depth: self.depth,
            memo,
        }
    }

    /// Take back what a branch remembered.
    fn rejoin(&mut self, branch: Walk<'_>) {
        self.memo = branch.memo;
    }

    /// How many schemas this walk and its branches checked a value against.
    #[cfg(test)]
    pub(crate) fn checks(&self) -> u64 {
        self.memo.checks
    }

    pub(crate) fn into_violations(self) -> Vec<Violation> {
        self.found
    }

    /// Record a violation here (the message is built only when collecting) and report failure. Cold: valid
    /// values, the common case, never get here, and keeping the formatting out of line keeps the walk small.
    #[cold]
    #[inline(never)]
    fn fail(&mut self, message: impl FnOnce() -> String) -> bool {
        if self.collect {
            self.found.push(Violation {
                instance_path: self.pointer(),
                message: message(),
            });
        }
        false
    }

    fn pointer(&self) -> String {
        let mut pointer = String::new();
        for segment in &self.path {
            pointer.push('/');
            match segment {
                Segment::Key(key) => {
                    for c in key.chars() {
                        match c {
                            '~' => pointer.push_str("~0"),
                            '/' => pointer.push_str("~1"),
                            c => pointer.push(c),
                        }
                    }
                }
                Segment::Index(index) => {
                    let _ = write!(pointer, "{index}");
                }
            }
        }
        pointer
    }

    fn enter(&mut self, segment: Segment<'v>) {
        if self.collect {
            self.path.push(segment);
        }
    }

    fn leave(&mut self) {
        if self.collect {
            self.path.pop();
        }
    }
}

/// Early exit of a quiet walk: the first failure decides.
macro_rules! settle {
    ($walk:expr, $valid:ident, $ok:expr) => {
        if !$ok {
            $valid = false;
            if !$walk.collect {
                return false;
            }
        }
    };
}

impl Tree {
    /// Whether `value` satisfies node `id`, recording violations when the walk collects.
    pub(crate) fn check<'v>(&self, id: NodeId, value: &'v Value, walk: &mut Walk<'v>) -> bool {
        if walk.depth >= MAX_CHECK_DEPTH {
            return walk.fail(|| {
                format!(
                    "checking this value goes more than {MAX_CHECK_DEPTH} schemas deep, which is not supported"
                )
            });
        }
        walk.depth += 1;
        walk.memo.checks += 1;
        let ok = if self.shared[id] {
            self.check_remembered(id, value, walk)
        } else {
            self.check_node(id, value, walk)
        };
        walk.depth -= 1;
        ok
    }

    /// [`Tree::check_node`] of a shared node, once per value and kind of walk: a quiet walk needs the answer, a
    /// collecting one the violations, and a collecting walk that already reported them does not repeat them.
    fn check_remembered<'v>(&self, id: NodeId, value: &'v Value, walk: &mut Walk<'v>) -> bool {
        let key = (id, std::ptr::from_ref(value) as usize);
        if let Some(seen) = walk.memo.seen.get_mut(&key) {
            if seen.valid || !walk.collect {
                return seen.valid;
            }
            if seen.reported_by == walk.id {
                return false;
            }
            if let Some(first) = &seen.first {
                // Said in full by another walk: this one gets the first violation, enough to say what is wrong.
                let first = first.clone();
                seen.reported_by = walk.id;
                walk.found.push(first);
                return false;
            }
        }
        let before = walk.found.len();
        let valid = self.check_node(id, value, walk);
        let seen = Seen {
            valid,
            first: walk.found.get(before).cloned(),
            reported_by: if walk.collect { walk.id } else { 0 },
        };
        walk.memo.seen.insert(key, seen);
        valid
    }

    fn check_node<'v>(&self, id: NodeId, value: &'v Value, walk: &mut Walk<'v>) -> bool {
        match &self.nodes[id] {
            Node::Any | Node::Pending => true,
            Node::Nothing => walk.fail(|| "no value is allowed here".to_owned()),
            Node::Checks(checks) => {
                let mut valid = true;
                for check in checks.iter() {
                    let ok = self.keyword(check, value, walk);
                    settle!(walk, valid, ok);
                }
                valid
            }
        }
    }

    fn child<'v>(
        &self,
        id: NodeId,
        segment: Segment<'v>,
        value: &'v Value,
        walk: &mut Walk<'v>,
    ) -> bool {
        walk.enter(segment);
        let ok = self.check(id, value, walk);
        walk.leave();
        ok
    }

    /// Whether `value` satisfies `id`, without recording anything: in a quiet walk, the walk itself; in a
    /// collecting one, a quiet branch sharing its memory.
    fn is_valid<'v>(&self, id: NodeId, value: &'v Value, walk: &mut Walk<'v>) -> bool {
        if !walk.collect {
            return self.check(id, value, walk);
        }
        let mut quiet = walk.branch(false);
        let ok = self.check(id, value, &mut quiet);
        walk.rejoin(quiet);
        ok
    }

    fn keyword<'v>(&self, check: &Check, value: &'v Value, walk: &mut Walk<'v>) -> bool {
        match check {
            Check::Type(types) => {
                if has_type(*types, value) {
                    true
                } else {
                    walk.fail(|| {
                        let expected: Vec<&str> = types.names().collect();
                        format!(
                            "expected {}, found {} {}",
                            expected.join(" or "),
                            type_name(value),
                            show(value)
                        )
                    })
                }
            }
            Check::Enum(options) => {
                if options.iter().any(|option| json_equal(option, value)) {
                    true
                } else {
                    walk.fail(|| {
                        let listed: Vec<String> = options.iter().map(show).collect();
                        format!(
                            "expected one of {}, found {}",
                            cut(listed.join(", ")),
                            show(value)
                        )
                    })
                }
            }
            Check::Const(expected) => {
                if json_equal(expected, value) {
                    true
                } else {
                    walk.fail(|| format!("expected {}, found {}", show(expected), show(value)))
                }
            }
            Check::Ref(target) => self.check(*target, value, walk),
            Check::AllOf(all) => {
                let mut valid = true;
                for id in all.iter() {
                    let ok = self.check(*id, value, walk);
                    settle!(walk, valid, ok);
                }
                valid
            }
            Check::AnyOf(any) => {
                if any.iter().any(|id| self.is_valid(*id, value, walk)) {
                    return true;
                }
                self.none_matched("anyOf", any, value, walk)
            }
            Check::OneOf(one) => {
                let matching: Vec<usize> = one
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| self.is_valid(**id, value, walk))
                    .map(|(index, _)| index)
                    .collect();
                match matching.len() {
                    1 => true,
                    0 => self.none_matched("oneOf", one, value, walk),
                    _ => walk.fail(|| {
                        let listed: Vec<String> = matching.iter().map(usize::to_string).collect();
                        format!(
                            "matches {} of the `oneOf` alternatives ({}), expected exactly one",
                            matching.len(),
                            listed.join(", ")
                        )
                    }),
                }
            }
            Check::Not(id) => {
                if self.is_valid(*id, value, walk) {
                    walk.fail(|| {
                        format!(
                            "{} matches the schema in `not`, which it must not",
                            show(value)
                        )
                    })
                } else {
                    true
                }
            }
            Check::IfThenElse {
                condition,
                then,
                otherwise,
            } => {
                let branch = if self.is_valid(*condition, value, walk) {
                    then
                } else {
                    otherwise
                };
                match branch {
                    Some(id) => self.check(*id, value, walk),
                    None => true,
                }
            }
            _ => match value {
                Value::Object(map) => self.object_keyword(check, map, value, walk),
                Value::Array(items) => self.array_keyword(check, items, walk),
                Value::String(text) => string_keyword(check, text, walk),
                Value::Number(number) => number_keyword(check, number, walk),
                _ => true,
            },
        }
    }

    #[cold]
    #[inline(never)]
    /// The failure of `anyOf`/`oneOf` when no alternative matched: each alternative's first violation, so the
    /// model sees what each option wanted.
    fn none_matched<'v>(
        &self,
        keyword: &str,
        alternatives: &[NodeId],
        value: &'v Value,
        walk: &mut Walk<'v>,
    ) -> bool {
        if !walk.collect {
            return false;
        }
        let here = walk.pointer();
        let mut reasons = Vec::with_capacity(alternatives.len());
        for (index, id) in alternatives.iter().enumerate() {
            let mut fork = walk.branch(true);
            self.check(*id, value, &mut fork);
            let first = fork.found.first().cloned();
            walk.rejoin(fork);
            if let Some(first) = first {
                // Cut, because an alternative's reason holds the reasons of the alternatives inside it: uncut,
                // levels of `anyOf` would double the message per level.
                let reason = if first.instance_path == here {
                    format!("{index}: {}", first.message)
                } else {
                    format!("{index}: at {}: {}", first.instance_path, first.message)
                };
                reasons.push(cut_at(reason, SHOWN_REASON_CHARS));
            }
        }
        walk.fail(|| {
            format!(
                "matches none of the `{keyword}` alternatives ({})",
                reasons.join("; ")
            )
        })
    }

    fn object_keyword<'v>(
        &self,
        check: &Check,
        map: &'v serde_json::Map<String, Value>,
        value: &'v Value,
        walk: &mut Walk<'v>,
    ) -> bool {
        match check {
            Check::Properties {
                named,
                patterns,
                additional,
            } => {
                let mut valid = true;
                for (name, id) in named.iter() {
                    if let Some((key, property)) = map.get_key_value(&**name) {
                        let ok = self.child(*id, Segment::Key(key), property, walk);
                        settle!(walk, valid, ok);
                    }
                }
                if patterns.is_empty() && additional.is_none() {
                    return valid;
                }
                for (key, property) in map {
                    let mut matched = named
                        .binary_search_by(|(name, _)| (**name).cmp(key.as_str()))
                        .is_ok();
                    for (pattern, id) in patterns.iter() {
                        if pattern.regex.is_match(key) {
                            matched = true;
                            let ok = self.child(*id, Segment::Key(key), property, walk);
                            settle!(walk, valid, ok);
                        }
                    }
                    if matched {
                        continue;
                    }
                    if let Some(id) = additional {
                        let ok = if matches!(self.nodes[*id], Node::Nothing) {
                            walk.fail(|| {
                                format!(
                                    "property {} is not allowed",
                                    show(&Value::String(key.clone()))
                                )
                            })
                        } else {
                            self.child(*id, Segment::Key(key), property, walk)
                        };
                        settle!(walk, valid, ok);
                    }
                }
                valid
            }
            Check::Required(names) => {
                let mut valid = true;
                for name in names.iter() {
                    if !map.contains_key(&**name) {
                        let ok =
                            walk.fail(|| format!("missing required property {}", quoted(name)));
                        settle!(walk, valid, ok);
                    }
                }
                valid
            }
            Check::PropertyNames(id) => {
                let mut valid = true;
                for key in map.keys() {
                    // The name is a value of its own, built here: what a walk remembers is keyed by the address
                    // of values in the instance, so each name gets walks (and a memory) of its own.
                    let name = Value::String(key.clone());
                    let depth = walk.depth;
                    let mut quiet = Walk::quiet();
                    quiet.depth = depth;
                    if self.check(*id, &name, &mut quiet) {
                        continue;
                    }
                    let ok = walk.fail(|| {
                        let mut fork = Walk::collecting();
                        fork.depth = depth;
                        self.check(*id, &name, &mut fork);
                        let reason = fork
                            .found
                            .first()
                            .map(|v| v.message.clone())
                            .unwrap_or_else(|| "not allowed".to_owned());
                        format!("property name {}: {reason}", quoted(key))
                    });
                    settle!(walk, valid, ok);
                }
                valid
            }
            Check::MinProperties(min) => {
                if map.len() as u64 >= *min {
                    true
                } else {
                    walk.fail(|| format!("expected at least {min} properties, found {}", map.len()))
                }
            }
            Check::MaxProperties(max) => {
                if map.len() as u64 <= *max {
                    true
                } else {
                    walk.fail(|| format!("expected at most {max} properties, found {}", map.len()))
                }
            }
            Check::DependentRequired(dependencies) => {
                let mut valid = true;
                for (name, required) in dependencies.iter() {
                    if !map.contains_key(&**name) {
                        continue;
                    }
                    for other in required.iter() {
                        if !map.contains_key(&**other) {
                            let ok = walk.fail(|| {
                                format!(
                                    "property {} requires property {}",
                                    quoted(name),
                                    quoted(other)
                                )
                            });
                            settle!(walk, valid, ok);
                        }
                    }
                }
                valid
            }
            Check::DependentSchemas(dependencies) => {
                let mut valid = true;
                for (name, id) in dependencies.iter() {
                    if map.contains_key(&**name) {
                        let ok = self.check(*id, value, walk);
                        settle!(walk, valid, ok);
                    }
                }
                valid
            }
            _ => true,
        }
    }

    fn array_keyword<'v>(&self, check: &Check, items: &'v [Value], walk: &mut Walk<'v>) -> bool {
        match check {
            Check::Items { prefix, rest } => {
                let mut valid = true;
                for (index, item) in items.iter().enumerate() {
                    let id = match prefix.get(index) {
                        Some(id) => *id,
                        None => match rest {
                            Some(id) if matches!(self.nodes[*id], Node::Nothing) => {
                                // `items: false` after a prefix: one clear message instead of one per item.
                                let ok = walk.fail(|| {
                                    format!(
                                        "expected at most {} items, found {}",
                                        prefix.len(),
                                        items.len()
                                    )
                                });
                                settle!(walk, valid, ok);
                                break;
                            }
                            Some(id) => *id,
                            None => break,
                        },
                    };
                    let ok = self.child(id, Segment::Index(index), item, walk);
                    settle!(walk, valid, ok);
                }
                valid
            }
            Check::Contains { schema, min, max } => {
                let matching = items
                    .iter()
                    .filter(|item| self.is_valid(*schema, item, walk))
                    .count() as u64;
                if matching < *min {
                    walk.fail(|| {
                        if *min == 1 {
                            "no item matches the `contains` schema".to_owned()
                        } else {
                            format!("expected at least {min} items matching `contains`, found {matching}")
                        }
                    })
                } else if max.is_some_and(|max| matching > max) {
                    walk.fail(|| {
                        format!(
                            "expected at most {} items matching `contains`, found {matching}",
                            max.unwrap_or(0)
                        )
                    })
                } else {
                    true
                }
            }
            Check::MinItems(min) => {
                if items.len() as u64 >= *min {
                    true
                } else {
                    walk.fail(|| format!("expected at least {min} items, found {}", items.len()))
                }
            }
            Check::MaxItems(max) => {
                if items.len() as u64 <= *max {
                    true
                } else {
                    walk.fail(|| format!("expected at most {max} items, found {}", items.len()))
                }
            }
            Check::UniqueItems => {
                // Quadratic, which is fine at the sizes of tool arguments.
                for (i, a) in items.iter().enumerate() {
                    if let Some(j) = items[i + 1..].iter().position(|b| json_equal(a, b)) {
                        let j = i + 1 + j;
                        return walk.fail(|| {
                            format!("items {i} and {j} are equal, expected unique items")
                        });
                    }
                }
                true
            }
            _ => true,
        }
    }
}

fn has_type(types: Types, value: &Value) -> bool {
    match value {
        Value::Null => types.contains(Types::NULL),
        Value::Bool(_) => types.contains(Types::BOOLEAN),
        Value::Number(n) => {
            types.contains(Types::NUMBER) || (types.contains(Types::INTEGER) && is_integer(n))
        }
        Value::String(_) => types.contains(Types::STRING),
        Value::Array(_) => types.contains(Types::ARRAY),
        Value::Object(_) => types.contains(Types::OBJECT),
    }
}

fn quoted(name: &str) -> String {
    show(&Value::String(name.to_owned()))
}

fn string_keyword(check: &Check, text: &str, walk: &mut Walk<'_>) -> bool {
    match check {
        // Lengths count Unicode code points, as the spec says (not bytes, not UTF-16 units).
        Check::MinLength(min) => {
            let length = text.chars().count();
            if length as u64 >= *min {
                true
            } else {
                walk.fail(|| format!("expected at least {min} characters, found {length}"))
            }
        }
        Check::MaxLength(max) => {
            // Bytes bound code points from above: most strings pass without counting.
            if text.len() as u64 <= *max {
                return true;
            }
            let length = text.chars().count();
            if length as u64 <= *max {
                true
            } else {
                walk.fail(|| format!("expected at most {max} characters, found {length}"))
            }
        }
        Check::Pattern(pattern) => {
            if pattern.regex.is_match(text) {
                true
            } else {
                walk.fail(|| {
                    format!(
                        "expected a string matching `{}`, found {}",
                        pattern.source,
                        show(&Value::String(text.to_owned()))
                    )
                })
            }
        }
        _ => true,
    }
}

fn number_keyword(check: &Check, number: &serde_json::Number, walk: &mut Walk<'_>) -> bool {
    match check {
        Check::Bound(bound, limit) => {
            let order = compare_numbers(number, limit);
            let (ok, relation) = match bound {
                Bound::Minimum => (order.is_ge(), ">="),
                Bound::ExclusiveMinimum => (order.is_gt(), ">"),
                Bound::Maximum => (order.is_le(), "<="),
                Bound::ExclusiveMaximum => (order.is_lt(), "<"),
            };
            if ok {
                true
            } else {
                walk.fail(|| format!("expected a number {relation} {limit}, found {number}"))
            }
        }
        Check::MultipleOf(divisor) => {
            if is_multiple_of(number, divisor) {
                true
            } else {
                walk.fail(|| format!("expected a multiple of {divisor}, found {number}"))
            }
        }
        _ => true,
    }
}
