//! The data table every list page shows: a scrolling wrapper, a caption for screen readers,
//! one header row and the page's rows.

use leptos::prelude::*;

/// How a column header reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    Text,
    /// Right-aligned, like the numbers under it.
    Num,
    /// Named for screen readers only (a column of buttons).
    Hidden,
}

/// One column header of a [`DataTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    label: &'static str,
    look: Look,
    shown: bool,
}

impl Column {
    pub const fn text(label: &'static str) -> Column {
        Column { label, look: Look::Text, shown: true }
    }

    pub const fn num(label: &'static str) -> Column {
        Column { label, look: Look::Num, shown: true }
    }

    pub const fn hidden(label: &'static str) -> Column {
        Column { label, look: Look::Hidden, shown: true }
    }

    /// The column only where `shown` (an admin's column of actions).
    pub const fn when(self, shown: bool) -> Column {
        Column { shown: self.shown && shown, ..self }
    }

    fn header(self) -> impl IntoView {
        match self.look {
            Look::Text => view! { <th scope="col">{self.label}</th> }.into_any(),
            Look::Num => view! { <th scope="col" class="num">{self.label}</th> }.into_any(),
            Look::Hidden => view! { <th scope="col"><span class="sr-only">{self.label}</span></th> }.into_any(),
        }
    }
}

/// The class of a data table: "data", then the table's own (empty for none).
fn table_class(class: &str) -> String {
    if class.is_empty() { "data".to_string() } else { format!("data {class}") }
}

/// The headers of the columns that are shown, in order.
fn shown(columns: Vec<Column>) -> impl Iterator<Item = Column> {
    columns.into_iter().filter(|c| c.shown)
}

/// The rows under a [`DataTable`]'s body (`children`: the `<tr>`s of a `<tfoot>`), such as
/// totals.
#[slot]
pub struct TableFoot {
    children: Children,
}

/// A table of rows (`children`: the `<tr>`s) under one header row.
#[component]
pub fn DataTable(
    /// The table's own class, after "data" ("policy-table"); empty for none.
    class: &'static str,
    /// What the table lists, read to screen readers; none where the table sits under a heading
    /// or summary that says it.
    #[prop(optional, into)]
    caption: Option<String>,
    #[prop(into)] columns: Vec<Column>,
    #[prop(optional)] table_foot: Option<TableFoot>,
    children: Children,
) -> impl IntoView {
    view! {
        <div class="table-wrap">
            <table class=table_class(class)>
                {caption.map(|caption| view! { <caption class="sr-only">{caption}</caption> })}
                <thead>
                    <tr>{shown(columns).map(Column::header).collect_view()}</tr>
                </thead>
                <tbody>{children()}</tbody>
                {table_foot.map(|foot| view! { <tfoot>{(foot.children)()}</tfoot> })}
            </table>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_class_follows_data() {
        assert_eq!(table_class(""), "data");
        assert_eq!(table_class("policy-table"), "data policy-table");
    }

    #[test]
    fn columns_not_shown_are_left_out_in_order() {
        let cols = vec![Column::text("Rule"), Column::hidden("Actions").when(false), Column::num("GPUs").when(true)];
        assert_eq!(
            shown(cols).map(|c| (c.label, c.look)).collect::<Vec<_>>(),
            [("Rule", Look::Text), ("GPUs", Look::Num)]
        );
    }
}
