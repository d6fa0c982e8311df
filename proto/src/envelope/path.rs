//! Field paths for diagnostics (`FINDINGS/FINDING[2]/START_LINE`), rendered only on the error path.

/// A borrowed chain from a field up to the envelope root; cheap to build while walking the tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Path<'p> {
    parent: Option<&'p Path<'p>>,
    tag: &'static str,
    /// 1-based position among repeated blocks (models count findings from 1).
    index: Option<usize>,
}

impl<'p> Path<'p> {
    pub(crate) fn root(tag: &'static str) -> Path<'static> {
        Path {
            parent: None,
            tag,
            index: None,
        }
    }

    pub(crate) fn child(&'p self, tag: &'static str) -> Path<'p> {
        Path {
            parent: Some(self),
            tag,
            index: None,
        }
    }

    pub(crate) fn item(&'p self, tag: &'static str, index_from_one: usize) -> Path<'p> {
        Path {
            parent: Some(self),
            tag,
            index: Some(index_from_one),
        }
    }

    pub(crate) fn tag(&self) -> &'static str {
        self.tag
    }

    /// The root renders as its own tag; everything below it omits the root.
    pub(crate) fn render(&self) -> String {
        let mut segments = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            if p.parent.is_none() && !segments.is_empty() {
                break;
            }
            segments.push(match p.index {
                Some(i) => format!("{}[{i}]", p.tag),
                None => p.tag.to_owned(),
            });
            cur = p.parent;
        }
        segments.reverse();
        segments.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_without_root_below_it() {
        let root = Path::root("SAKURA_REVIEW");
        assert_eq!(root.render(), "SAKURA_REVIEW");
        let findings = root.child("FINDINGS");
        let finding = findings.item("FINDING", 2);
        assert_eq!(
            finding.child("START_LINE").render(),
            "FINDINGS/FINDING[2]/START_LINE"
        );
        assert_eq!(root.child("SUMMARY").render(), "SUMMARY");
    }
}
