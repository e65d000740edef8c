//! [`define_inner_service_accessors!`](crate::define_inner_service_accessors): the `get_ref` / `get_mut` /
//! `into_inner` every layer's service has, written once (as tower-http's own macro of that name does).

/// Inside `impl<S> Service<S> { … }` of a struct whose wrapped service is the field `inner`: the three accessors
/// tower's middleware have.
///
/// ```
/// struct Logged<S> {
///     inner: S,
/// }
///
/// impl<S> Logged<S> {
///     tower_chat::define_inner_service_accessors!();
/// }
///
/// let mut logged = Logged { inner: 7 };
/// *logged.get_mut() += 1;
/// assert_eq!((*logged.get_ref(), logged.into_inner()), (8, 8));
/// ```
#[macro_export]
macro_rules! define_inner_service_accessors {
    () => {
        /// The wrapped service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The wrapped service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Unwrap the wrapped service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}
