//! OWNER: sandbox hosts helper. Stub so the workspace compiles.
