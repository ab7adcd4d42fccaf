//! [`ConnectionObserver`]: where a listener reports its connections (the
//! decision service's metrics count them).

/// Told of every connection a listener opens, closes, or refuses at its
/// cap. Called on the accept loop and connection tasks: keep it cheap.
pub trait ConnectionObserver: Send + Sync + 'static {
    /// A connection was accepted and is being served.
    fn opened(&self);
    /// A connection that [`opened`](ConnectionObserver::opened) closed.
    fn closed(&self);
    /// A connection was closed as it came: the listener was at its cap.
    fn refused(&self);
}

/// Counts nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unobserved;

impl ConnectionObserver for Unobserved {
    fn opened(&self) {}
    fn closed(&self) {}
    fn refused(&self) {}
}
