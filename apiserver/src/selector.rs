//! Label and field selectors: parsing (with the real server's grammar) and matching.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::names::{valid_label_key, valid_label_value};
use crate::object::ObjectRecord;

/// A selector string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

/// Comparison in one label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

/// One `key op values` term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: LabelOp,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::In(vs) => value.is_some_and(|v| vs.contains(v)),
            LabelOp::NotIn(vs) => value.is_none_or(|v| !vs.contains(v)),
            LabelOp::Gt(n) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelOp::Lt(n) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Open,
    Close,
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
}

fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '(' | ')' | '=' | '!' | '<' | '>')
}

fn lex(input: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            ',' => {
                out.push(Token::Comma);
                i += 1;
            }
            '(' => {
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                out.push(Token::Close);
                i += 1;
            }
            '>' => {
                out.push(Token::Gt);
                i += 1;
            }
            '<' => {
                out.push(Token::Lt);
                i += 1;
            }
            '=' => {
                if chars.get(i + 1) == Some(&'=') {
                    out.push(Token::DoubleEq);
                    i += 2;
                } else {
                    out.push(Token::Eq);
                    i += 1;
                }
            }
            '!' => {
                if chars.get(i + 1) == Some(&'=') {
                    out.push(Token::NotEq);
                    i += 2;
                } else {
                    out.push(Token::Not);
                    i += 1;
                }
            }
            _ => {
                let start = i;
                while i < chars.len() && !is_special(chars[i]) {
                    i += 1;
                }
                out.push(Token::Ident(chars[start..i].iter().collect()));
            }
        }
    }
    out
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }
    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Some(Token::Ident(k)) => {
                if !valid_label_key(&k) {
                    return Err(SelectorError(format!("invalid label key \"{k}\"")));
                }
                Ok(k)
            }
            other => Err(SelectorError(format!(
                "found '{other:?}', expected: identifier"
            ))),
        }
    }

    fn value(&mut self) -> Result<String, SelectorError> {
        // An empty value (`key=`) is allowed when followed by a comma or the end.
        match self.peek() {
            None | Some(Token::Comma) | Some(Token::Close) => return Ok(String::new()),
            _ => {}
        }
        match self.next() {
            Some(Token::Ident(v)) => {
                if !valid_label_value(&v) {
                    return Err(SelectorError(format!("invalid label value: \"{v}\"")));
                }
                Ok(v)
            }
            other => Err(SelectorError(format!(
                "found '{other:?}', expected: identifier"
            ))),
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Some(Token::Open) => {}
            other => return Err(SelectorError(format!("found '{other:?}', expected: '('"))),
        }
        let mut values = Vec::new();
        if self.peek() == Some(&Token::Close) {
            self.pos += 1;
        } else {
            loop {
                match self.peek() {
                    Some(Token::Ident(_)) => values.push(self.value()?),
                    Some(Token::Comma) | Some(Token::Close) => values.push(String::new()),
                    other => {
                        return Err(SelectorError(format!(
                            "found '{other:?}', expected: ',', ')' or identifier"
                        )));
                    }
                }
                match self.next() {
                    Some(Token::Comma) => continue,
                    Some(Token::Close) => break,
                    other => {
                        return Err(SelectorError(format!(
                            "found '{other:?}', expected: ',' or ')'"
                        )));
                    }
                }
            }
        }
        if values.is_empty() {
            return Err(SelectorError(
                "for 'in', 'notin' operators, values set can't be empty".into(),
            ));
        }
        Ok(values)
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Not) {
            self.pos += 1;
            let key = self.key()?;
            return Ok(Requirement {
                key,
                op: LabelOp::DoesNotExist,
            });
        }
        let key = self.key()?;
        let op = match self.peek() {
            None | Some(Token::Comma) => LabelOp::Exists,
            Some(Token::Eq) | Some(Token::DoubleEq) => {
                self.pos += 1;
                LabelOp::In(vec![self.value()?])
            }
            Some(Token::NotEq) => {
                self.pos += 1;
                LabelOp::NotIn(vec![self.value()?])
            }
            Some(Token::Gt) | Some(Token::Lt) => {
                let gt = self.next() == Some(Token::Gt);
                let v = self.value()?;
                let n: i64 = v.parse().map_err(|_| {
                    SelectorError(format!(
                        "for 'Gt', 'Lt' operators, the value must be an integer: {v}"
                    ))
                })?;
                if gt { LabelOp::Gt(n) } else { LabelOp::Lt(n) }
            }
            Some(Token::Ident(word)) if word == "in" => {
                self.pos += 1;
                LabelOp::In(self.value_set()?)
            }
            Some(Token::Ident(word)) if word == "notin" => {
                self.pos += 1;
                LabelOp::NotIn(self.value_set()?)
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "found '{other:?}', expected: in, notin, =, ==, !=, gt, lt"
                )));
            }
        };
        Ok(Requirement { key, op })
    }
}

impl LabelSelector {
    /// Parse a selector such as `app=web,tier in (a,b),!legacy`.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut p = Parser {
            tokens: lex(input),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if p.tokens.is_empty() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(p.requirement()?);
            match p.next() {
                None => break,
                Some(Token::Comma) => {
                    if p.peek().is_none() {
                        return Err(SelectorError(
                            "found '', expected: identifier after ','".into(),
                        ));
                    }
                }
                Some(other) => {
                    return Err(SelectorError(format!("found '{other:?}', expected: ','")));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// A field in a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// `metadata.name`
    Name,
    /// `metadata.namespace`
    Namespace,
    /// Any other dotted path into the object (e.g. `status.phase`, `involvedObject.name`):
    /// a superset of the per-kind fields real servers support. Missing fields read as `""`.
    Path(Vec<String>),
}

/// One `field=value` or `field!=value` term.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: Field,
    value: String,
    negated: bool,
}

/// A parsed field selector (`metadata.name`, `metadata.namespace`, or dotted paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// Split on unescaped `sep`, keeping backslash escapes for later.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if escaped {
        cur.push('\\');
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> Result<String, SelectorError> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | ',' | '=')) => out.push(n),
                Some(n) => return Err(SelectorError(format!("invalid escape sequence \\{n}"))),
                None => return Err(SelectorError("trailing backslash".into())),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parse a selector such as `metadata.name=foo,metadata.namespace!=bar`.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector { terms });
        }
        for part in split_unescaped(input, ',') {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                )));
            };
            let field = match field.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    let segments: Vec<String> = other.split('.').map(str::to_string).collect();
                    let valid = segments.iter().all(|seg| {
                        !seg.is_empty()
                            && seg
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    });
                    if !valid {
                        return Err(SelectorError(format!("field label not supported: {other}")));
                    }
                    Field::Path(segments)
                }
            };
            terms.push(FieldTerm {
                field,
                value: unescape(value.trim())?,
                negated,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// A selector that selects exactly one name (used by legacy single-object watch paths).
    pub fn with_name(mut self, name: &str) -> Self {
        self.terms.push(FieldTerm {
            field: Field::Name,
            value: name.into(),
            negated: false,
        });
        self
    }

    /// Whether an object with this namespace and name is selected (path fields read as `""`).
    pub fn matches(&self, namespace: &str, name: &str) -> bool {
        self.matches_with(namespace, name, || None)
    }

    /// Whether an object is selected; `object` is only called (once) when a path field needs it.
    pub fn matches_with(
        &self,
        namespace: &str,
        name: &str,
        object: impl FnOnce() -> Option<serde_json::Value>,
    ) -> bool {
        let mut object = Some(object);
        let mut parsed: Option<Option<serde_json::Value>> = None;
        self.terms.iter().all(|t| {
            let path_value;
            let actual = match &t.field {
                Field::Name => name,
                Field::Namespace => namespace,
                Field::Path(segments) => {
                    let doc = parsed.get_or_insert_with(|| object.take().and_then(|f| f()));
                    let mut cur = doc.as_ref();
                    for seg in segments {
                        cur = cur.and_then(|v| v.get(seg.as_str()));
                    }
                    path_value = match cur {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(serde_json::Value::Null) | None => String::new(),
                        Some(other) => other.to_string(),
                    };
                    path_value.as_str()
                }
            };
            (actual == t.value) != t.negated
        })
    }

    /// Whether this selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_and_inequality() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(LabelSelector::parse("app=web").unwrap().matches(&l));
        assert!(LabelSelector::parse("app==web").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app!=web").unwrap().matches(&l));
        assert!(LabelSelector::parse("missing!=x").unwrap().matches(&l));
        assert!(
            LabelSelector::parse("app=web, tier=front")
                .unwrap()
                .matches(&l)
        );
        assert!(
            !LabelSelector::parse("app=web,tier=back")
                .unwrap()
                .matches(&l)
        );
    }

    #[test]
    fn set_based() {
        let l = labels(&[("env", "prod")]);
        assert!(
            LabelSelector::parse("env in (prod, dev)")
                .unwrap()
                .matches(&l)
        );
        assert!(
            !LabelSelector::parse("env notin (prod,dev)")
                .unwrap()
                .matches(&l)
        );
        assert!(LabelSelector::parse("other notin (x)").unwrap().matches(&l));
        assert!(LabelSelector::parse("env").unwrap().matches(&l));
        assert!(!LabelSelector::parse("!env").unwrap().matches(&l));
        assert!(LabelSelector::parse("!other,env").unwrap().matches(&l));
        assert!(LabelSelector::parse("").unwrap().matches(&l));
        let n = labels(&[("n", "5")]);
        assert!(LabelSelector::parse("n>3").unwrap().matches(&n));
        assert!(!LabelSelector::parse("n<3").unwrap().matches(&n));
    }

    #[test]
    fn empty_value_is_allowed() {
        let l = labels(&[("a", "")]);
        assert!(LabelSelector::parse("a=").unwrap().matches(&l));
        assert!(LabelSelector::parse("a in (,x)").unwrap().matches(&l));
    }

    #[test]
    fn syntax_errors() {
        for bad in [
            "app=",
            "app==web==x",
            "=web",
            "app in (",
            "app in ()",
            "app in web",
            "a b",
            "app,",
            "-bad=x",
            "app=!x",
            "n>x",
            "app=(x)",
        ] {
            if bad == "app=" {
                continue; // valid: empty value
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should fail");
        }
        assert!(LabelSelector::parse("example.com/app=x").is_ok());
        assert!(LabelSelector::parse("Example_/app=x").is_err());
    }

    #[test]
    fn field_selectors() {
        let f = FieldSelector::parse("metadata.name=foo").unwrap();
        assert!(f.matches("ns", "foo"));
        assert!(!f.matches("ns", "bar"));
        let f = FieldSelector::parse("metadata.namespace!=kube-system,metadata.name==a").unwrap();
        assert!(f.matches("default", "a"));
        assert!(!f.matches("kube-system", "a"));
        assert!(FieldSelector::parse("spec.node Name=x").is_err());
        assert!(FieldSelector::parse("spec..x=y").is_err());
        let f = FieldSelector::parse("status.phase=Running,spec.replicas!=3").unwrap();
        let obj = serde_json::json!({"status": {"phase": "Running"}, "spec": {"replicas": 2}});
        assert!(f.matches_with("", "p", || Some(obj.clone())));
        let obj = serde_json::json!({"status": {"phase": "Running"}, "spec": {"replicas": 3}});
        assert!(!f.matches_with("", "p", || Some(obj.clone())));
        assert!(!f.matches("", "p"), "a missing field reads as empty");
        assert!(FieldSelector::parse("garbage").is_err());
        let f = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert!(f.matches("", "a,b"));
        assert!(FieldSelector::parse("").unwrap().is_empty());
    }
}

/// Everything that restricts which objects a list or watch sees.
#[derive(Debug, Clone, Default)]
pub struct ObjectFilter {
    /// Only this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl ObjectFilter {
    /// Whether the object is selected.
    pub fn matches(&self, object: &ObjectRecord) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| *object.key.namespace == *ns)
            && self.labels.matches(&object.labels)
            && self
                .fields
                .matches_with(&object.key.namespace, &object.key.name, || {
                    serde_json::from_slice(&object.json).ok()
                })
    }

    /// Whether label or field selectors narrow the result (the real server then omits `remainingItemCount`).
    pub fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
}
