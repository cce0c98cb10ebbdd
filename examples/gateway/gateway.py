#!/usr/bin/python3
"""The third article's case, atomic: a Flask API that gives each user a
bucket made on first use from the template 'user:*' (the DBA creates it,
see run.sh), through the tokenbucket package's WSGI middleware: 429 Too
Many Requests with Retry-After and RateLimit when the user's bucket is
empty, 400 for a key that could not be a user's.

    gateway.py --dsn DSN --port 8401

GET /hello?user=KEY  200 or 429, with RateLimit ("default";r=<left>;t=<s>)
                     and Retry-After in whole seconds rounded up on a 429;
                     400 when KEY is missing or not 1 to 64 of A-Z a-z 0-9 _ . -
"""
import argparse
import os
import signal
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from flask import Flask, request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
import tokenbucket  # noqa: E402
from tokenbucket.middleware import WSGIMiddleware, from_query  # noqa: E402


def make_app(dsn):
    app = Flask("gateway")

    @app.get("/hello")
    def hello():
        return f"hello, {request.args['user']}\n"

    # the whole limiter: the gateway's role only takes tokens (tb_try is PUBLIC's)
    app.wsgi_app = WSGIMiddleware(app.wsgi_app, tokenbucket.Limiter(dsn),
                                  key=from_query("user"), prefix="user:")
    return app


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--port", type=int, default=8401)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))     # stopped by run.sh: a clean end
    make_server("127.0.0.1", args.port, make_app(args.dsn), server_class=Server,
                handler_class=Quiet).serve_forever()


if __name__ == "__main__":
    main()
