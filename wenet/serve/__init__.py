"""The streaming recognition server: WebSocket protocol, sessions, browser page."""
