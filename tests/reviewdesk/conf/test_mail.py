"""Outbound mail from the environment: EMAIL_URL or the EMAIL_* variables, checked loudly."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from reviewdesk.conf.mail import email_settings


def test_an_email_url_names_host_port_credentials_tls_and_timeout():
    settings = email_settings(
        {"EMAIL_URL": "smtp+tls://desk%40example.com:p%40ss@mail.example.com:2525?timeout=7"},
        default_timeout=10,
    )
    assert settings == {
        "EMAIL_HOST": "mail.example.com",
        "EMAIL_PORT": 2525,
        "EMAIL_HOST_USER": "desk@example.com",
        "EMAIL_HOST_PASSWORD": "p@ss",
        "EMAIL_USE_TLS": True,
        "EMAIL_USE_SSL": False,
        "EMAIL_TIMEOUT": 7.0,
    }


def test_smtps_means_implicit_tls_on_465_and_the_timeout_defaults_to_ten_seconds():
    settings = email_settings({"EMAIL_URL": "smtps://mail.example.com"}, default_timeout=10)
    assert (settings["EMAIL_PORT"], settings["EMAIL_USE_SSL"], settings["EMAIL_TIMEOUT"]) == (465, True, 10)


def test_the_variables_one_by_one_are_read_when_there_is_no_url():
    settings = email_settings(
        {"EMAIL_HOST": "smtp.local", "EMAIL_PORT": "1025", "EMAIL_USE_TLS": "1", "EMAIL_TIMEOUT": "3"},
        default_timeout=10,
    )
    assert (settings["EMAIL_HOST"], settings["EMAIL_PORT"], settings["EMAIL_USE_TLS"]) == (
        "smtp.local",
        1025,
        True,
    )
    assert settings["EMAIL_TIMEOUT"] == 3.0


@pytest.mark.parametrize(
    "environ",
    [
        {"EMAIL_URL": "smtp://a.example", "EMAIL_HOST": "b.example"},  # both ways at once
        {"EMAIL_URL": "http://a.example"},
        {"EMAIL_URL": "smtp://a.example?tsl=1"},
        {"EMAIL_URL": "smtp://a.example:notaport"},
        {"EMAIL_USE_TLS": "1", "EMAIL_USE_SSL": "1"},
        {"EMAIL_PORT": "twenty-five"},
        {"EMAIL_TIMEOUT": "0"},
        {"EMAIL_USE_TLS": "maybe"},
    ],
)
def test_a_bad_mail_setting_stops_the_process_with_its_name(environ):
    with pytest.raises(ImproperlyConfigured):
        email_settings(environ, default_timeout=10)
