"""The HTTP surface: the server, the API, the status page (/ui), the capacity-request API
and the status view they share."""
