//! Writes envelopes in the canonical block form: for round-trip tests, examples and fixtures.

/// Builds an envelope line by line.
#[derive(Debug)]
pub(crate) struct Writer {
    out: String,
}

impl Writer {
    pub(crate) fn new(root: &str) -> Writer {
        let mut w = Writer {
            out: String::with_capacity(1024),
        };
        w.open(root);
        w
    }

    pub(crate) fn open(&mut self, tag: &str) {
        self.out.push('<');
        self.out.push_str(tag);
        self.out.push_str(">\n");
    }

    pub(crate) fn close(&mut self, tag: &str) {
        self.out.push_str("</");
        self.out.push_str(tag);
        self.out.push_str(">\n");
    }

    pub(crate) fn scalar(&mut self, tag: &str, value: &str) {
        self.out.push('<');
        self.out.push_str(tag);
        self.out.push('>');
        self.out.push_str(value);
        self.close(tag);
    }

    /// A text field in block form; `None` is written as `NONE`.
    pub(crate) fn text(&mut self, tag: &str, value: Option<&str>) {
        self.open(tag);
        self.out.push_str(value.unwrap_or("NONE"));
        self.out.push('\n');
        self.close(tag);
    }

    pub(crate) fn finish(mut self, root: &str) -> String {
        self.close(root);
        self.out
    }
}
