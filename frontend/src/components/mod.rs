//! Reusable pieces: page cards, form fields, status lines, empty-list messages, badges, meters, the range
//! picker, the app header, the data table.

pub mod card;
pub mod form;
pub mod header;
pub mod list;
pub mod meter;
pub mod range_picker;
pub mod state_badge;
pub mod status;
pub mod table;

/// Moves keyboard focus to the first element matching `selector` once the DOM has updated (a
/// "Confirm delete" button that replaced the one just pressed).
pub fn focus_later(selector: &'static str) {
    leptos::prelude::request_animation_frame(move || {
        if let Ok(Some(el)) = leptos::prelude::document().query_selector(selector) {
            let _ = wasm_bindgen::JsCast::unchecked_into::<web_sys::HtmlElement>(el).focus();
        }
    });
}
