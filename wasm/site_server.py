"""The HTTP side of `ember serve`: a built site's regular files and nothing else, within bounded time and threads.

What a request may reach: a regular file whose real path (symlinks resolved) lies under the site's real root,
named by a path none of whose segments starts with "." (no dotfiles, no `..`). A folder is served as its
index.html when it has one; there are no listings. Anything else is a 404. What a client may hold and send
(connections, the header deadline, the request line; a status for every request that does not parse) is
ember.httpd's, as for `ember api`.
"""
from __future__ import annotations

import email.utils
import http.server
import os
import stat
import urllib.parse

from ember.httpd import BoundedRequests, BoundedServer


class SiteHandler(BoundedRequests, http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler narrowed to a site's regular files (see the module docstring), GET and HEAD only.
    Subclasses add headers in end_headers (self.path is always set, "" before the request line is read)."""

    # ---------------------------------------------------------------- what a path may name
    def resolve(self, url_path: str) -> str | None:
        """The real path of the regular file `url_path` names under the site, or None (then 404)."""
        path = urllib.parse.urlsplit(url_path).path
        try:
            path = urllib.parse.unquote(path, errors="strict")
        except UnicodeDecodeError:
            return None
        parts = [p for p in path.split("/") if p]
        if "\0" in path or "\\" in path or any(p.startswith(".") for p in parts):
            return None
        root = os.path.realpath(self.directory)
        real = os.path.realpath(os.path.join(root, *parts))
        if real != root and not real.startswith(root + os.sep):
            return None  # a symlink (file or folder) out of the site
        if os.path.isdir(real):
            if parts and not path.endswith("/"):
                return None  # the stdlib redirects to the slash form; a site links files, not folders
            real = os.path.join(real, "index.html")
            if os.path.realpath(real) != real:
                return None
        elif path.endswith("/"):
            return None  # a file named as a folder
        try:
            st = os.lstat(real)
        except (OSError, ValueError):
            return None
        return real if stat.S_ISREG(st.st_mode) else None

    def send_head(self):
        real = self.resolve(self.path)
        if real is None:
            self.send_error(404, "File not found")
            return None
        try:
            f = open(real, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):  # swapped between the check and the open
                raise OSError("not a regular file")
            since = self.headers.get("If-Modified-Since")
            if since and not self.headers.get("If-None-Match"):
                try:
                    when = email.utils.parsedate_to_datetime(since)
                except (TypeError, ValueError, IndexError, OverflowError):
                    when = None
                if when is not None and when.tzinfo is not None and int(st.st_mtime) <= when.timestamp():
                    self.send_response(304)
                    self.end_headers()
                    f.close()
                    return None
            self.send_response(200)
            self.send_header("Content-type", self.guess_type(real))
            self.send_header("Content-Length", str(st.st_size))
            self.send_header("Last-Modified", self.date_time_string(st.st_mtime))
            self.end_headers()
            return f
        except BaseException:
            f.close()
            raise

    def list_directory(self, path):  # never reached through send_head; kept shut for any other caller
        self.send_error(404, "File not found")
        return None


def make_site_server(folder, handler=SiteHandler, port: int = 0, host: str = "127.0.0.1", **limits) -> BoundedServer:
    """A server for the site in `folder` on host:port (0: any free port); limits: max_connections,
    header_seconds, idle_seconds, max_request_line (ember.httpd.BoundedServer; default: its settings)."""
    import functools
    return BoundedServer((host, port), functools.partial(handler, directory=os.fspath(folder)), **limits)
