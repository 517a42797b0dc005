use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    super::set_title("Not found");
    view! {
        <main id="content" class="narrow">
            <h1>"Page not found"</h1>
            <p>"There is nothing at this address. " <a href="/">"Go to the fleet overview"</a>"."</p>
        </main>
    }
}
