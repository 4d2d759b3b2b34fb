//! OWNER: sandbox API helper. Stub so the workspace compiles.
