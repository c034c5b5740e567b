"""Runs the Django REST framework backend of the differential test on a
free loopback port (wsgiref, one thread per request), then prints three
SimpleJWT access tokens and the port:

    TOKEN <access token of user 1>
    TOKEN <access token of user 2>
    TOKEN <another access token of user 2>
    LISTENING <port>

and serves until it is killed."""

import os
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["DJANGO_SETTINGS_MODULE"] = "drfbackend.settings"

import django  # noqa: E402

django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from rest_framework_simplejwt.tokens import AccessToken  # noqa: E402


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Handler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def token(user_id):
    t = AccessToken()
    t["user_id"] = user_id
    return str(t)


httpd = make_server("127.0.0.1", 0, get_wsgi_application(), server_class=Server, handler_class=Handler)
print("TOKEN", token(1))
print("TOKEN", token(2))
print("TOKEN", token(2))
print("LISTENING", httpd.server_port, flush=True)
httpd.serve_forever()
