//! Reading the rate-limit headers in tests with a real Structured Fields
//! parser (RFC 9651), not with the code under test.

/// The members of a Structured Field list (`RateLimit-Policy`,
/// `RateLimit`): each member's string and its integer parameters, in order.
/// Panics on anything else, which is a failed test.
pub fn sf_list_members(text: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let list: sfv::List = sfv::Parser::new(text)
        .parse_list()
        .unwrap_or_else(|e| panic!("not a Structured Field list ({e}): {text}"));
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("inner list in {text}");
            };
            let member = item.bare_item.as_string().unwrap().as_str().to_owned();
            let params = item
                .params
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), i64::from(v.as_integer().unwrap())))
                .collect();
            (member, params)
        })
        .collect()
}
