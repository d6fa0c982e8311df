//! GitHub's pagination: `per_page` (default 30, at most 100) and `page` (from 1), and the `Link`
//! header with absolute URLs in GitHub's order (`prev`, `next`, `last`, `first`), omitted when
//! everything fits on one page.

const DEFAULT_PER_PAGE: usize = 30;
const MAX_PER_PAGE: usize = 100;

/// Which slice of a list a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Page {
    pub page: usize,
    pub per_page: usize,
}

impl Page {
    /// Reads `page` and `per_page` from a query; values GitHub would not use (not a number, 0)
    /// fall back to the defaults, and `per_page` is capped at 100, as GitHub does.
    pub(super) fn from_query(query: Option<&str>) -> Page {
        let mut page = Page {
            page: 1,
            per_page: DEFAULT_PER_PAGE,
        };
        for (name, value) in pairs(query) {
            let Ok(n) = value.parse::<usize>() else {
                continue;
            };
            match name {
                "page" if n > 0 => page.page = n,
                "per_page" if n > 0 => page.per_page = n.min(MAX_PER_PAGE),
                _ => {}
            }
        }
        page
    }

    /// The items on this page.
    pub(super) fn slice<'a, T>(&self, items: &'a [T]) -> &'a [T] {
        let start = (self.page - 1).saturating_mul(self.per_page);
        if start >= items.len() {
            return &[];
        }
        let end = start.saturating_add(self.per_page).min(items.len());
        &items[start..end]
    }

    /// The `Link` header for a list of `total` items at `url` (absolute, without query), keeping
    /// the request's other query parameters in their order and putting `page` last, as GitHub
    /// writes it. `None` when there is only one page and this is it.
    pub(super) fn link(&self, url: &str, query: Option<&str>, total: usize) -> Option<String> {
        let last = total.div_ceil(self.per_page).max(1);
        if last == 1 && self.page == 1 {
            return None;
        }
        let kept: Vec<String> = pairs(query)
            .filter(|(name, _)| *name != "page")
            .map(|(name, value)| {
                if value.is_empty() {
                    name.to_owned()
                } else {
                    format!("{name}={value}")
                }
            })
            .collect();
        let to = |page: usize, rel: &str| {
            let mut params = kept.clone();
            params.push(format!("page={page}"));
            format!("<{url}?{}>; rel=\"{rel}\"", params.join("&"))
        };
        let mut links = Vec::new();
        if self.page > 1 {
            links.push(to(self.page - 1, "prev"));
        }
        if self.page < last {
            links.push(to(self.page + 1, "next"));
            links.push(to(last, "last"));
        }
        if self.page > 1 {
            links.push(to(1, "first"));
        }
        Some(links.join(", "))
    }
}

/// `a=1&b=2` → `("a", "1"), ("b", "2")`, raw (the fake's own parameters are plain digits).
fn pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:1/api/v3/repos/o/r/labels";

    #[test]
    fn defaults_and_caps() {
        assert_eq!(
            Page::from_query(None),
            Page {
                page: 1,
                per_page: 30
            }
        );
        assert_eq!(
            Page::from_query(Some("per_page=500&page=3")),
            Page {
                page: 3,
                per_page: 100
            }
        );
        assert_eq!(
            Page::from_query(Some("per_page=0&page=x")),
            Page {
                page: 1,
                per_page: 30
            }
        );
    }

    #[test]
    fn slices() {
        let items: Vec<u32> = (1..=7).collect();
        let page = |p, n| Page {
            page: p,
            per_page: n,
        };
        assert_eq!(page(1, 3).slice(&items), [1, 2, 3]);
        assert_eq!(page(3, 3).slice(&items), [7]);
        assert!(page(4, 3).slice(&items).is_empty());
    }

    #[test]
    fn links_in_githubs_order() {
        assert_eq!(Page::from_query(None).link(URL, None, 30), None);
        let first = Page::from_query(Some("per_page=2")).link(URL, Some("per_page=2"), 5);
        assert_eq!(
            first.as_deref(),
            Some(
                "<http://127.0.0.1:1/api/v3/repos/o/r/labels?per_page=2&page=2>; rel=\"next\", \
                 <http://127.0.0.1:1/api/v3/repos/o/r/labels?per_page=2&page=3>; rel=\"last\""
            )
        );
        let query = Some("page=2&per_page=2");
        let middle = Page::from_query(query).link(URL, query, 5);
        assert_eq!(
            middle.as_deref(),
            Some(
                "<http://127.0.0.1:1/api/v3/repos/o/r/labels?per_page=2&page=1>; rel=\"prev\", \
                 <http://127.0.0.1:1/api/v3/repos/o/r/labels?per_page=2&page=3>; rel=\"next\", \
                 <http://127.0.0.1:1/api/v3/repos/o/r/labels?per_page=2&page=3>; rel=\"last\", \
                 <http://127.0.0.1:1/api/v3/repos/o/r/labels?per_page=2&page=1>; rel=\"first\""
            )
        );
        let query = Some("page=3&per_page=2");
        let last = Page::from_query(query).link(URL, query, 5).unwrap();
        assert!(!last.contains("rel=\"next\""));
        assert!(last.contains("page=2>; rel=\"prev\""));
    }
}
