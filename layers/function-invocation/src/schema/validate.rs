//! Walking an instance through the compiled tree. One walk serves both questions: "is it valid?" (quiet: stops
//! at the first failure, builds no paths or messages) and "what is wrong?" (collecting: every violation, each
//! with the instance path where it was found).

use std::fmt::Write;

use serde_json::Value;

use super::compile::{Bound, Check, Node, NodeId, Tree, Types};
use super::value::{compare_numbers, cut, is_integer, is_multiple_of, json_equal, show, type_name};
use super::Violation;

/// A step of the instance path.
#[derive(Clone, Copy, Debug)]
enum Segment<'v> {
    Key(&'v str),
    Index(usize),
}

/// The state of one walk.
pub(crate) struct Walk<'v> {
    collect: bool,
    path: Vec<Segment<'v>>,
    found: Vec<Violation>,
}

impl<'v> Walk<'v> {
    /// A walk that only answers valid or not.
    pub(crate) fn quiet() -> Self {
        Walk {
            collect: false,
            path: Vec::new(),
            found: Vec::new(),
        }
    }

    /// A walk that records every violation.
    pub(crate) fn collecting() -> Self {
        Walk {
            collect: true,
            ..Walk::quiet()
        }
    }

    /// A collecting walk starting at the same place as this one.
    fn fork(&self) -> Self {
        Walk {
            collect: true,
            path: self.path.clone(),
            found: Vec::new(),
        }
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

    fn is_valid(&self, id: NodeId, value: &Value) -> bool {
        self.check(id, value, &mut Walk::quiet())
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
                if any.iter().any(|id| self.is_valid(*id, value)) {
                    return true;
                }
                self.none_matched("anyOf", any, value, walk)
            }
            Check::OneOf(one) => {
                let matching: Vec<usize> = one
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| self.is_valid(**id, value))
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
                if self.is_valid(*id, value) {
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
                let branch = if self.is_valid(*condition, value) {
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
            let mut fork = walk.fork();
            self.check(*id, value, &mut fork);
            if let Some(first) = fork.found.first() {
                if first.instance_path == here {
                    reasons.push(format!("{index}: {}", first.message));
                } else {
                    reasons.push(format!(
                        "{index}: at {}: {}",
                        first.instance_path, first.message
                    ));
                }
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
                    let name = Value::String(key.clone());
                    if self.is_valid(*id, &name) {
                        continue;
                    }
                    let ok = walk.fail(|| {
                        let mut fork = Walk::collecting();
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
                    .filter(|item| self.is_valid(*schema, item))
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
