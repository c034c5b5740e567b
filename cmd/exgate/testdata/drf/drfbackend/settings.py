"""Settings of the Django REST framework backend the differential test
(cmd/exgate/drf_test.go) puts behind exgate: one order view with
SimpleJWT authentication, a markets endpoint, nothing else."""

from datetime import timedelta

SECRET_KEY = "exgate-drf-differential-test-signing-key-0123456789"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "drfbackend.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
]
# No CommonMiddleware (no APPEND_SLASH redirects), no sessions, no CSRF:
# an API backend behind a gateway.
MIDDLEWARE = []
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# As a DRF deployment has them: the templates of the browsable API, which
# DRF's default renderers answer an Accept of text/html with (HTML 201s
# duplicate protection must not replay to a JSON retry:
# cmd/exgate/drf_replay_test.go).
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
STATIC_URL = "/static/"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework_simplejwt.authentication.JWTStatelessUserAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,
    # The API version from the Accept header's parameters
    # ("application/json; version=2.0"), as DRF backends commonly read it.
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.AcceptHeaderVersioning",
}

SIMPLE_JWT = {
    "ALGORITHM": "HS256",
    "SIGNING_KEY": SECRET_KEY,
    "ACCESS_TOKEN_LIFETIME": timedelta(hours=1),
    "AUTH_HEADER_TYPES": ("Bearer",),
    "USER_ID_CLAIM": "user_id",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": True,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "ERROR"},
}
