//! Fields of the dashboard's forms.

use leptos::prelude::*;

use crate::api::ApiError;
use fleetlens_api::alerts::ChannelView as Channel;
use fleetlens_core::ChannelKind;

/// A labelled text input bound to `value`. With the form's `error` and the `field` it maps to,
/// the input is `aria-invalid` while the error is about that field (the message itself shows
/// under the form, a [`FieldError`](super::status::FieldError)).
#[component]
pub fn TextField(
    /// The input's id, which the label points at.
    id: &'static str,
    label: &'static str,
    value: RwSignal<String>,
    #[prop(optional)] error: Option<RwSignal<Option<ApiError>>>,
    /// The server's name of the field (`error.field`).
    #[prop(optional)]
    field: &'static str,
    /// The label's class ("grow" for a wide field).
    #[prop(optional)]
    class: Option<&'static str>,
    /// The input's type when not text: "password", "email", "url".
    #[prop(optional)]
    input_type: Option<&'static str>,
    #[prop(optional)] autocomplete: Option<&'static str>,
    #[prop(optional)] inputmode: Option<&'static str>,
    #[prop(optional)] placeholder: Option<&'static str>,
) -> impl IntoView {
    let invalid = move || error.map(|e| e.with(|e| e.as_ref().is_some_and(|e| e.is_about(field))).to_string());
    view! {
        <label for=id class=class>
            <span>{label}</span>
            <input
                id=id
                type=input_type
                autocomplete=autocomplete
                inputmode=inputmode
                placeholder=placeholder
                aria-invalid=invalid
                prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev))
            />
        </label>
    }
}

/// A labelled choice among the channels that can carry a message to a person (every kind but
/// Alertmanager), shown as "name (kind)"; `value` holds the chosen id, empty for `none_label`.
#[component]
pub fn MessageChannelSelect(
    /// The select's id, which the label points at.
    id: &'static str,
    label: &'static str,
    /// The first option, which chooses no channel.
    none_label: &'static str,
    value: RwSignal<String>,
    channels: Memo<Vec<Channel>>,
    #[prop(optional)] error: Option<RwSignal<Option<ApiError>>>,
    /// The server's name of the field (`error.field`).
    #[prop(optional)]
    field: &'static str,
) -> impl IntoView {
    let invalid = move || error.map(|e| e.with(|e| e.as_ref().is_some_and(|e| e.is_about(field))).to_string());
    view! {
        <label for=id>
            <span>{label}</span>
            <select id=id aria-invalid=invalid on:change=move |ev| value.set(event_target_value(&ev))>
                <option value="">{none_label}</option>
                {move || channels.get().into_iter().filter(|c| c.kind != ChannelKind::Alertmanager).map(|c| view! {
                    <option value=c.id.to_string()>{format!("{} ({})", c.name, c.kind)}</option>
                }).collect_view()}
            </select>
        </label>
    }
}

/// A text input under its label (the login form's layout; the input's `name` is its id),
/// bound to `value`; `aria-invalid` while `invalid`.
#[component]
pub fn StackedField(
    /// The input's id and name, which the label points at.
    id: &'static str,
    label: &'static str,
    value: RwSignal<String>,
    #[prop(into)] invalid: Signal<bool>,
    /// The input's type when not text: "password", "email".
    #[prop(optional)]
    input_type: Option<&'static str>,
    #[prop(optional)] autocomplete: Option<&'static str>,
    #[prop(optional)] required: bool,
    #[prop(optional)] spellcheck: Option<&'static str>,
    /// The id of the help text that describes the input.
    #[prop(optional)]
    describedby: Option<&'static str>,
) -> impl IntoView {
    view! {
        <label for=id>{label}</label>
        <input
            id=id
            name=id
            type=input_type
            autocomplete=autocomplete
            required=required
            spellcheck=spellcheck
            aria-describedby=describedby
            aria-invalid=move || invalid.get().to_string()
            prop:value=move || value.get()
            on:input=move |ev| value.set(event_target_value(&ev))
        />
    }
}

/// Options of a select: (value, label).
pub type Choices = &'static [(&'static str, &'static str)];

/// A labelled choice in a section's head ("Status", "Group by"): `options`, then `groups` of
/// options under their labels. `value` keeps the select on a value held elsewhere (the
/// address); else `selected` is the option chosen at first.
#[component]
pub fn InlineSelect(
    label: &'static str,
    options: Choices,
    #[prop(optional)] groups: &'static [(&'static str, Choices)],
    #[prop(optional, into)] value: Option<Signal<String>>,
    #[prop(optional)] selected: Option<&'static str>,
    on_change: Callback<String>,
) -> impl IntoView {
    let choices = move |options: Choices| {
        options.iter().map(|&(v, l)| view! { <option value=v selected=selected == Some(v)>{l}</option> }).collect_view()
    };
    let select = view! {
        <select on:change=move |ev| on_change.run(event_target_value(&ev))>
            {choices(options)}
            {groups.iter().map(|&(l, options)| view! { <optgroup label=l>{choices(options)}</optgroup> }).collect_view()}
        </select>
    };
    // Only a select that follows a value gets the property (a select without one keeps its
    // `selected` option).
    let select = match value {
        Some(value) => select.into_inner().prop("value", move || value.get()).into_any(),
        None => select.into_any(),
    };
    view! {
        <label class="inline">
            <span>{label}</span>
            {select}
        </label>
    }
}
